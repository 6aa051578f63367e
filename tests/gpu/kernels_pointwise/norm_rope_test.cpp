// CUDA rmsnorm / rmsnorm_backward / rope against the CPU kernels (spindle::kernels), both
// element types, odd sizes, padded row strides, rows = 0 and 1, in place, and the contract
// checks (which run without a device: they throw before any CUDA call).

#include <cmath>
#include <stdexcept>
#include <vector>

#include "pointwise_test_util.h"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/cuda/rope.h"
#include "spindle/kernels/norm.h"
#include "spindle/kernels/rope.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class PointwiseNorm : public ::testing::Test {};
TYPED_TEST_SUITE(PointwiseNorm, ElementTypes, ElementTypeNames);

struct NormShape {
  int64_t rows, n;
};
const NormShape kNormShapes[] = {{0, 8}, {1, 1}, {1, 300}, {7, 5}, {5, 128}, {3, 1000}};

TYPED_TEST(PointwiseNorm, RmsnormMatchesCpu) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  for (const auto [rows, n] : kNormShapes) {
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " n " << n << " in_place " << in_place);
      const int64_t ld_x = n + 3;
      const int64_t ld_y = in_place ? ld_x : n + 1;
      const auto x = quantize<T>(random_floats(size_t(rows * ld_x), uint32_t(n), -2.0f, 2.0f));
      const auto w = random_floats(size_t(n), uint32_t(n + 1), 0.5f, 1.5f);
      std::vector<float> y_ref(size_t(rows * ld_y), 0.0f);
      std::vector<float> inv_ref(static_cast<size_t>(rows));
      kernels::rmsnorm(x.data(), ld_x, w.data(), y_ref.data(), ld_y, rows, n, 1e-5f,
                       inv_ref.data());

      auto d_x = upload_as<T>(x);
      auto d_w = upload_vec(w);
      DeviceBuffer<T> d_y_own(size_t(rows * ld_y));
      DeviceBuffer<float> d_inv(static_cast<size_t>(rows));
      T* d_y = in_place ? d_x.data() : d_y_own.data();
      rmsnorm<T>(d_x.data(), ld_x, d_w.data(), d_y, ld_y, rows, n, 1e-5f, d_inv.data(),
                 stream.get());
      stream.synchronize();
      const auto y = in_place ? download_floats(d_x) : download_floats(d_y_own);
      std::vector<float> got;
      std::vector<float> want;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          got.push_back(y[size_t(r * ld_y + j)]);
          want.push_back(y_ref[size_t(r * ld_y + j)]);
        }
      }
      EXPECT_TRUE(all_close(got, want, Tol<T>::abs, Tol<T>::rel, "y"));
      EXPECT_TRUE(all_close(d_inv.download(), inv_ref, 1e-7, 1e-5, "inv_rms"));
    }
  }
}

TYPED_TEST(PointwiseNorm, RmsnormBackwardMatchesCpu) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  for (const auto [rows, n] : kNormShapes) {
    for (const float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " n " << n << " beta " << beta);
      const int64_t ld_x = n + 2;
      const int64_t ld_dy = n;
      const int64_t ld_dx = n + 5;
      const auto x = quantize<T>(random_floats(size_t(rows * ld_x), uint32_t(3 * n), -2.0f, 2.0f));
      const auto w = random_floats(size_t(n), uint32_t(3 * n + 1), 0.5f, 1.5f);
      const auto dy = quantize<T>(random_floats(size_t(rows * ld_dy), uint32_t(3 * n + 2)));
      const auto dx0 = quantize<T>(random_floats(size_t(rows * ld_dx), uint32_t(3 * n + 3)));
      std::vector<float> scratch(size_t(rows * ld_x));
      std::vector<float> inv(static_cast<size_t>(rows));
      kernels::rmsnorm(x.data(), ld_x, w.data(), scratch.data(), ld_x, rows, n, 1e-6f, inv.data());
      auto dx_ref = dx0;
      kernels::rmsnorm_backward(x.data(), ld_x, w.data(), inv.data(), dy.data(), ld_dy,
                                dx_ref.data(), ld_dx, rows, n, beta);

      auto d_x = upload_as<T>(x);
      auto d_w = upload_vec(w);
      auto d_inv = upload_vec(inv);
      auto d_dy = upload_as<T>(dy);
      auto d_dx = upload_as<T>(dx0);
      rmsnorm_backward<T>(d_x.data(), ld_x, d_w.data(), d_inv.data(), d_dy.data(), ld_dy,
                          d_dx.data(), ld_dx, rows, n, beta, stream.get());
      stream.synchronize();
      const auto dx = download_floats(d_dx);
      // dx = inv·t − coef·x cancels: the absolute tolerance scales with the row's magnitude.
      std::vector<double> want(dx_ref.begin(), dx_ref.end());
      const double scale = max_abs(want);
      // Padding between rows (j >= n) must be untouched.
      EXPECT_TRUE(all_close(dx, want, Tol<T>::abs + Tol<T>::rel * scale, Tol<T>::rel, "dx"));
    }
  }
}

std::vector<float> inv_freq_for(int64_t head_dim) {
  std::vector<float> f(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    f[size_t(i)] = 1.0f / std::pow(1000000.0f, float(2 * i) / float(head_dim));
  return f;
}

TYPED_TEST(PointwiseNorm, RopeMatchesCpuBothStylesAndInverse) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  struct Case {
    int64_t rows, n_heads, head_dim;
  };
  for (const auto [rows, n_heads, head_dim] :
       {Case{0, 2, 8}, Case{1, 1, 2}, Case{5, 3, 6}, Case{9, 4, 64}, Case{3, 2, 128}}) {
    const int64_t ld = n_heads * head_dim + 7;
    const auto x =
        quantize<T>(random_floats(size_t(rows * ld), uint32_t(rows * head_dim + 1), -2.0f, 2.0f));
    std::vector<int32_t> pos(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) pos[size_t(r)] = int32_t((r * 977 + 3) % 40000);
    const auto inv_freq = inv_freq_for(head_dim);
    auto d_pos = upload_vec(pos);
    auto d_freq = upload_vec(inv_freq);
    for (const RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
      for (const bool inverse : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "rows " << rows << " heads " << n_heads << " hd " << head_dim << " style "
                     << int(style) << " inverse " << inverse);
        auto want = x;
        kernels::rope(want.data(), ld, rows, n_heads, head_dim, pos.data(), inv_freq.data(), style,
                      inverse);
        auto d_x = upload_as<T>(x);
        rope<T>(d_x.data(), ld, rows, n_heads, head_dim, d_pos.data(), d_freq.data(), style,
                inverse, stream.get());
        stream.synchronize();
        // fp32: sincosf vs the host's cosf/sinf, a few ulps of values of magnitude ~2.
        const double abs_tol = std::is_same_v<T, float> ? 4e-6 : 2e-2;
        EXPECT_TRUE(all_close(download_floats(d_x), want, abs_tol, Tol<T>::rel, "x"));
      }
    }
  }
}

TEST(PointwiseNormF32, RopeInverseUndoesForward) {
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t rows = 6, n_heads = 2, head_dim = 32, ld = n_heads * head_dim;
  const auto x = random_floats(size_t(rows * ld), 99u, -2.0f, 2.0f);
  std::vector<int32_t> pos = {0, 1, 17, 255, 4096, 32767};
  auto d_pos = upload_vec(pos);
  auto d_freq = upload_vec(inv_freq_for(head_dim));
  auto d_x = upload_vec(x);
  for (const RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
    rope<float>(d_x.data(), ld, rows, n_heads, head_dim, d_pos.data(), d_freq.data(), style,
                /*inverse=*/false, stream.get());
    rope<float>(d_x.data(), ld, rows, n_heads, head_dim, d_pos.data(), d_freq.data(), style,
                /*inverse=*/true, stream.get());
  }
  stream.synchronize();
  EXPECT_TRUE(all_close(d_x.download(), x, 2e-6, 1e-6, "x after rope, inverse rope"));
}

// Contract checks throw on the host before any CUDA call, so they run without a device.
TEST(PointwiseNormContracts, ViolationsThrowInvalidArgument) {
  float* f = reinterpret_cast<float*>(uintptr_t{256});
  const int32_t* p = reinterpret_cast<const int32_t*>(uintptr_t{256});
  EXPECT_THROW(rmsnorm<float>(f, 4, f, f, 4, 1, 0, 1e-5f, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(rmsnorm<float>(f, 3, f, f, 4, 1, 4, 1e-5f, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(rmsnorm<bf16>(nullptr, 4, f, nullptr, 4, 2, 4, 1e-5f, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(rmsnorm<float>(f, 4, nullptr, f, 4, 2, 4, 1e-5f, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(rmsnorm_backward<float>(f, 4, f, f, f + 64, 4, f, 4, 2, 4, 0.0f, nullptr),
               std::invalid_argument);  // dx aliases x
  EXPECT_THROW(rmsnorm_backward<float>(f, 4, f, f, f + 64, 3, f + 128, 4, 2, 4, 0.0f, nullptr),
               std::invalid_argument);  // ld_dy < n
  EXPECT_THROW(
      rmsnorm_backward<float>(f, 4, f, nullptr, f + 64, 4, f + 128, 4, 2, 4, 0.0f, nullptr),
      std::invalid_argument);  // inv_rms null
  EXPECT_THROW(rope<float>(f, 6, 1, 2, 3, p, f, RopeStyle::half, false, nullptr),
               std::invalid_argument);  // odd head_dim
  EXPECT_THROW(rope<float>(f, 7, 1, 2, 4, p, f, RopeStyle::half, false, nullptr),
               std::invalid_argument);  // ld < n_heads·head_dim
  EXPECT_THROW(rope<bf16>(nullptr, 8, 1, 2, 4, p, f, RopeStyle::half, false, nullptr),
               std::invalid_argument);
  EXPECT_THROW(rope<float>(f, 8, 1, 2, 4, p, f, static_cast<RopeStyle>(7), false, nullptr),
               std::invalid_argument);
  // rows = 0 is a no-op even with null pointers.
  EXPECT_NO_THROW(rmsnorm<float>(nullptr, 4, nullptr, nullptr, 4, 0, 4, 1e-5f, nullptr, nullptr));
  EXPECT_NO_THROW(
      rope<float>(nullptr, 8, 0, 2, 4, nullptr, nullptr, RopeStyle::half, false, nullptr));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
