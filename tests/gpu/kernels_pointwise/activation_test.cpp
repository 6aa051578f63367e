// CUDA swiglu / swiglu_backward against the CPU kernels, embedding gather (exact copy) and
// scatter-add (against a double loop, repeated tokens), both element types, and the contract
// checks (host-side, no device needed).

#include <stdexcept>
#include <vector>

#include "pointwise_test_util.h"
#include "spindle/kernels/activation.h"
#include "spindle/kernels/cuda/activation.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class PointwiseActivation : public ::testing::Test {};
TYPED_TEST_SUITE(PointwiseActivation, ElementTypes, ElementTypeNames);

TYPED_TEST(PointwiseActivation, SwigluMatchesCpuIncludingInPlace) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{257}, int64_t{100003}}) {
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message() << "count " << count << " in_place " << in_place);
      // Gates reach ±30: e^-g overflows neither side of the sigmoid.
      const auto gate =
          quantize<T>(random_floats(size_t(count), uint32_t(count + 1), -30.0f, 30.0f));
      const auto up = quantize<T>(random_floats(size_t(count), uint32_t(count + 2), -2.0f, 2.0f));
      std::vector<float> want(static_cast<size_t>(count));
      kernels::swiglu(gate.data(), up.data(), want.data(), count);
      auto d_gate = upload_as<T>(gate);
      auto d_up = upload_as<T>(up);
      DeviceBuffer<T> d_out_own(static_cast<size_t>(count));
      T* out = in_place ? d_gate.data() : d_out_own.data();
      swiglu<T>(d_gate.data(), d_up.data(), out, count, stream.get());
      stream.synchronize();
      const auto got = in_place ? download_floats(d_gate) : download_floats(d_out_own);
      EXPECT_TRUE(all_close(got, want, Tol<T>::abs, Tol<T>::rel, "out"));
    }
  }
}

TYPED_TEST(PointwiseActivation, SwigluBackwardMatchesCpu) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{33}, int64_t{70001}}) {
    SCOPED_TRACE(testing::Message() << "count " << count);
    const auto gate = quantize<T>(random_floats(size_t(count), uint32_t(count + 5), -30.0f, 30.0f));
    const auto up = quantize<T>(random_floats(size_t(count), uint32_t(count + 6), -2.0f, 2.0f));
    const auto d_out = quantize<T>(random_floats(size_t(count), uint32_t(count + 7)));
    std::vector<float> want_gate(static_cast<size_t>(count));
    std::vector<float> want_up(static_cast<size_t>(count));
    kernels::swiglu_backward(gate.data(), up.data(), d_out.data(), want_gate.data(), want_up.data(),
                             count);
    auto dg = upload_as<T>(gate);
    auto du = upload_as<T>(up);
    auto dd = upload_as<T>(d_out);
    DeviceBuffer<T> d_gate(static_cast<size_t>(count));
    DeviceBuffer<T> d_up(static_cast<size_t>(count));
    swiglu_backward<T>(dg.data(), du.data(), dd.data(), d_gate.data(), d_up.data(), count,
                       stream.get());
    stream.synchronize();
    EXPECT_TRUE(all_close(download_floats(d_gate), want_gate, Tol<T>::abs, Tol<T>::rel, "d_gate"));
    EXPECT_TRUE(all_close(download_floats(d_up), want_up, Tol<T>::abs, Tol<T>::rel, "d_up"));
  }
}

TYPED_TEST(PointwiseActivation, EmbeddingGatherCopiesRowsExactly) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t vocab = 11, dim = 37, ld_out = 40;
  const auto table = quantize<T>(random_floats(size_t(vocab * dim), 5u, -3.0f, 3.0f));
  auto d_table = upload_as<T>(table);
  for (const std::vector<int32_t>& tokens : {std::vector<int32_t>{}, std::vector<int32_t>{10},
                                             std::vector<int32_t>{3, 0, 3, 10, 7, 7, 1}}) {
    const int64_t rows = int64_t(tokens.size());
    SCOPED_TRACE(testing::Message() << "rows " << rows);
    const float kUntouched = 7.0f;
    std::vector<float> want(size_t(rows * ld_out), kUntouched);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < dim; ++c)
        want[size_t(r * ld_out + c)] = table[size_t(tokens[size_t(r)] * dim + c)];
    auto d_tokens = upload_vec(tokens);
    auto d_out = upload_as<T>(std::vector<float>(size_t(rows * ld_out), kUntouched));
    embedding_gather<T>(d_table.data(), dim, d_tokens.data(), rows, d_out.data(), ld_out,
                        stream.get());
    stream.synchronize();
    EXPECT_TRUE(all_close(download_floats(d_out), want, 0.0, 0.0, "out"));
  }
}

TYPED_TEST(PointwiseActivation, EmbeddingScatterAddAccumulatesRepeatedTokens) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t vocab = 13, dim = 45, ld = 50;
  const std::vector<int32_t> tokens = {4, 0, 4, 12, 4, 7, 0, 12, 12, 12, 3};
  const int64_t rows = int64_t(tokens.size());
  const auto d_out = quantize<T>(random_floats(size_t(rows * ld), 21u));
  const auto table0 = random_floats(size_t(vocab * dim), 22u);
  std::vector<double> want(table0.begin(), table0.end());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim; ++c)
      want[size_t(tokens[size_t(r)] * dim + c)] += d_out[size_t(r * ld + c)];
  auto dd = upload_as<T>(d_out);
  auto d_tokens = upload_vec(tokens);
  auto d_table = upload_vec(table0);
  embedding_scatter_add<T>(dd.data(), ld, d_tokens.data(), rows, dim, d_table.data(), stream.get());
  embedding_scatter_add<T>(dd.data(), ld, d_tokens.data(), 0, dim, d_table.data(), stream.get());
  stream.synchronize();
  // fp32 accumulation of at most 5 terms in any order.
  EXPECT_TRUE(all_close(d_table.download(), want, 1e-6, 1e-6, "d_table"));
}

// moe_combine: x[t] = beta·x[t] + Σ_k w·src[pos], against a double loop; weighted with beta 1
// (the experts' combine) and unweighted with beta 0 over a NaN-filled x (the gradient scatter,
// which must never read x).
TYPED_TEST(PointwiseActivation, MoeCombineAddsEachTokensRowsInOrder) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t rows = 7, K = 3, dim = 41, ld_src = 44, ld_x = 48, src_rows = rows * K;
  const auto src = quantize<T>(random_floats(size_t(src_rows * ld_src), 31u, -2.0f, 2.0f));
  // A permutation of the source rows, token t's K rows at pos[t·K..].
  std::vector<int32_t> pos(size_t(rows * K));
  for (int64_t i = 0; i < rows * K; ++i) pos[size_t(i)] = int32_t((i * 5 + 3) % src_rows);
  const auto w = random_floats(size_t(rows * K), 32u, 0.0f, 1.0f);
  const auto x0 = quantize<T>(random_floats(size_t(rows * ld_x), 33u, -1.0f, 1.0f));
  auto d_src = upload_as<T>(src);
  auto d_pos = upload_vec(pos);
  auto d_w = upload_vec(w);
  for (const bool weighted : {true, false}) {
    SCOPED_TRACE(testing::Message() << "weighted " << weighted);
    const float beta = weighted ? 1.0f : 0.0f;
    std::vector<double> want(x0.begin(), x0.end());
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t c = 0; c < dim; ++c) {
        double acc = weighted ? double(x0[size_t(t * ld_x + c)]) : 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double v = src[size_t(pos[size_t(t * K + k)] * ld_src + c)];
          acc += weighted ? double(w[size_t(t * K + k)]) * v : v;
        }
        want[size_t(t * ld_x + c)] = acc;
      }
    }
    std::vector<float> start = x0;
    if (!weighted) {  // columns past dim stay as they were; the rest must not be read
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t c = 0; c < dim; ++c) start[size_t(t * ld_x + c)] = NAN;
    }
    auto d_x = upload_as<T>(start);
    moe_combine<T>(d_src.data(), ld_src, d_pos.data(), weighted ? d_w.data() : nullptr, rows, K,
                   dim, beta, d_x.data(), ld_x, stream.get());
    stream.synchronize();
    EXPECT_TRUE(all_close(download_floats(d_x), want, Tol<T>::abs, Tol<T>::rel, "x"));
  }
}

// moe_combine_backward: d_out = w·dy[rows] (the same rounding as a host fp32 product) and
// d_w = dy[rows]·out against a double dot; twice on the same inputs, bitwise the same d_w.
TYPED_TEST(PointwiseActivation, MoeCombineBackwardScalesRowsAndDotsDeterministically) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t tokens = 5, n = 9, dim = 300, ld = 304;  // dim > the block: strided loop
  const auto dy = quantize<T>(random_floats(size_t(tokens * ld), 41u, -2.0f, 2.0f));
  const auto out = quantize<T>(random_floats(size_t(n * ld), 42u, -2.0f, 2.0f));
  const auto w = random_floats(size_t(n), 43u, 0.0f, 1.0f);
  std::vector<int32_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[size_t(i)] = int32_t((i * 3) % tokens);
  std::vector<double> want_d(size_t(n * ld), 0.0), want_w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double dot = 0;
    for (int64_t c = 0; c < dim; ++c) {
      const float g = dy[size_t(rows[size_t(i)] * ld + c)];
      want_d[size_t(i * ld + c)] = double(w[size_t(i)] * g);
      dot += double(g) * out[size_t(i * ld + c)];
    }
    want_w[size_t(i)] = dot;
  }
  auto d_dy = upload_as<T>(dy);
  auto d_out_in = upload_as<T>(out);
  auto d_rows = upload_vec(rows);
  auto d_wt = upload_vec(w);
  auto d_grad = upload_as<T>(std::vector<float>(size_t(n * ld), 0.0f));
  DeviceBuffer<float> d_w1(static_cast<size_t>(n)), d_w2(static_cast<size_t>(n));
  moe_combine_backward<T>(d_dy.data(), ld, d_rows.data(), d_wt.data(), d_out_in.data(), ld, n,
                          dim, d_grad.data(), ld, d_w1.data(), stream.get());
  moe_combine_backward<T>(d_dy.data(), ld, d_rows.data(), d_wt.data(), d_out_in.data(), ld, n,
                          dim, d_grad.data(), ld, d_w2.data(), stream.get());
  stream.synchronize();
  EXPECT_TRUE(all_close(download_floats(d_grad), want_d, Tol<T>::abs, Tol<T>::rel, "d_out"));
  const auto w1 = d_w1.download(), w2 = d_w2.download();
  EXPECT_TRUE(all_close(w1, want_w, 1e-4, 1e-5, "d_w"));
  EXPECT_EQ(w1, w2);
}

TEST(PointwiseActivationContracts, ViolationsThrowInvalidArgument) {
  float* f = reinterpret_cast<float*>(uintptr_t{256});
  const int32_t* p = reinterpret_cast<const int32_t*>(uintptr_t{256});
  EXPECT_THROW(swiglu<float>(f, f, f, -1, nullptr), std::invalid_argument);
  EXPECT_THROW(swiglu<bf16>(nullptr, nullptr, nullptr, 4, nullptr), std::invalid_argument);
  EXPECT_THROW(swiglu_backward<float>(f, f + 8, f + 16, f, f + 24, 4, nullptr),
               std::invalid_argument);  // d_gate aliases gate
  EXPECT_THROW(swiglu_backward<float>(f, f + 8, f + 16, f + 24, f + 24, 4, nullptr),
               std::invalid_argument);  // d_gate == d_up
  EXPECT_THROW(swiglu_backward<float>(f, f + 8, nullptr, f + 24, f + 32, 4, nullptr),
               std::invalid_argument);
  EXPECT_THROW(embedding_gather<float>(f, 0, p, 1, f, 4, nullptr), std::invalid_argument);
  EXPECT_THROW(embedding_gather<float>(f, 8, p, 1, f, 7, nullptr), std::invalid_argument);
  EXPECT_THROW(embedding_gather<bf16>(nullptr, 8, p, 1, nullptr, 8, nullptr),
               std::invalid_argument);
  EXPECT_THROW(embedding_scatter_add<float>(f, 3, p, 1, 4, f, nullptr), std::invalid_argument);
  EXPECT_THROW(embedding_scatter_add<float>(f, 4, nullptr, 1, 4, f, nullptr),
               std::invalid_argument);
  EXPECT_THROW(embedding_scatter_add<float>(f, 4, p, -1, 4, f, nullptr), std::invalid_argument);
  EXPECT_THROW(moe_combine<float>(f, 8, p, f, 2, 0, 8, 1.0f, f, 8, nullptr),
               std::invalid_argument);  // K 0
  EXPECT_THROW(moe_combine<float>(f, 7, p, f, 2, 2, 8, 1.0f, f, 8, nullptr),
               std::invalid_argument);  // ld_src < dim
  EXPECT_THROW(moe_combine<bf16>(nullptr, 8, p, nullptr, 2, 2, 8, 0.0f, nullptr, 8, nullptr),
               std::invalid_argument);
  EXPECT_NO_THROW(moe_combine<float>(nullptr, 8, nullptr, nullptr, 0, 2, 8, 1.0f, nullptr, 8,
                                     nullptr));
  EXPECT_THROW(moe_combine_backward<float>(f, 8, p, f, f + 64, 8, 2, 8, f, 8, f + 128, nullptr),
               std::invalid_argument);  // d_out aliases dy
  EXPECT_THROW(moe_combine_backward<float>(f, 7, p, f, f + 64, 8, 2, 8, f + 256, 8, f + 128,
                                           nullptr),
               std::invalid_argument);  // ld_dy < dim
  EXPECT_THROW(moe_combine_backward<bf16>(nullptr, 8, p, nullptr, nullptr, 8, 2, 8, nullptr, 8,
                                          nullptr, nullptr),
               std::invalid_argument);
  EXPECT_NO_THROW(swiglu<float>(nullptr, nullptr, nullptr, 0, nullptr));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
