// GPU attention_backward against the CPU kernel (kernels::attention_backward) on the same
// inputs, and in fp32 against central finite differences of a scalar loss computed by a
// double-precision forward in the test. bf16 cases run on both paths: tensor cores (where
// head_dim allows) and the CUDA-core kernels.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "gpu_test_util.h"
#include "spindle/kernels/attention.h"
#include "spindle/kernels/cuda/attention.h"

namespace spindle::kernels::cuda::test {
namespace {

// Rows between sequences must stay untouched (all_close accepts NaN only against NaN).
const float kSentinel = std::numeric_limits<float>::quiet_NaN();

struct DenseCase {
  int64_t n_heads, n_kv, hd;
  std::vector<int64_t> lens;
  uint32_t seed;
};

struct Grads {
  std::vector<float> dq, dk, dv;
};

// Sequences are laid out in order with one unused row before each, so "rows outside sequences
// untouched" is checked along with the values.
struct DenseLayout {
  std::vector<DenseSeq> seqs;
  int64_t rows = 0;
  int32_t max_n = 0;
  explicit DenseLayout(const std::vector<int64_t>& lens) {
    for (int64_t n : lens) {
      rows += 1;
      seqs.push_back({rows, n});
      rows += n;
      max_n = std::max(max_n, static_cast<int32_t>(n));
    }
  }
};

template <class T>
Grads gpu_backward(const DenseCase& c, const DenseLayout& lay, const std::vector<float>& q,
                   const std::vector<float>& k, const std::vector<float>& v,
                   const std::vector<float>& d_out, float scale, bool allow_tc = true) {
  auto d_q = upload_vec(to_elements<T>(q));
  auto d_k = upload_vec(to_elements<T>(k));
  auto d_v = upload_vec(to_elements<T>(v));
  auto d_do = upload_vec(to_elements<T>(d_out));
  auto d_dq = upload_vec(to_elements<T>(std::vector<float>(q.size(), kSentinel)));
  auto d_dk = upload_vec(to_elements<T>(std::vector<float>(k.size(), kSentinel)));
  auto d_dv = upload_vec(to_elements<T>(std::vector<float>(v.size(), kSentinel)));
  auto d_seqs = upload_vec(lay.seqs);
  // upload_vec() runs on the legacy stream, which a non-blocking stream does not wait for.
  check(cudaDeviceSynchronize(), "sync after upload");
  // The path the call takes is the one the case asks for (bf16, head_dim a multiple of 16).
  const bool tc_possible = std::is_same_v<T, bf16> && c.hd % 16 == 0 && c.hd <= 128;
  EXPECT_EQ(attention_backward_uses_tensor_cores<T>(d_q.data(), d_k.data(), d_v.data(), d_do.data(),
                                                    d_dq.data(), d_dk.data(), d_dv.data(), c.hd),
            tc_possible);
  Stream stream;
  const int32_t n_seqs = static_cast<int32_t>(lay.seqs.size());
  const size_t scratch_bytes = attention_backward_scratch_bytes(n_seqs, lay.max_n, c.n_heads);
  DeviceBuffer<unsigned char> scratch(scratch_bytes);
  attention_backward<T>(d_q.data(), d_k.data(), d_v.data(), d_do.data(), d_dq.data(), d_dk.data(),
                        d_dv.data(), c.n_heads, c.n_kv, c.hd, d_seqs.data(), n_seqs, lay.max_n,
                        scale, scratch.data(), scratch_bytes, stream.get(), allow_tc);
  stream.synchronize();
  return {to_floats<T>(d_dq.download()), to_floats<T>(d_dk.download()),
          to_floats<T>(d_dv.download())};
}

template <class T>
void check_against_cpu(const DenseCase& c) {
  const DenseLayout lay(c.lens);
  const int64_t ld_q = c.n_heads * c.hd;
  const int64_t ld_kv = c.n_kv * c.hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  const auto q = quantize<T>(random_floats(size_t(lay.rows * ld_q), c.seed));
  const auto k = quantize<T>(random_floats(size_t(lay.rows * ld_kv), c.seed + 1));
  const auto v = quantize<T>(random_floats(size_t(lay.rows * ld_kv), c.seed + 2));
  const auto d_out = quantize<T>(random_floats(size_t(lay.rows * ld_q), c.seed + 3));

  Grads want{std::vector<float>(q.size(), kSentinel), std::vector<float>(k.size(), kSentinel),
             std::vector<float>(v.size(), kSentinel)};
  kernels::attention_backward(q.data(), k.data(), v.data(), d_out.data(), want.dq.data(),
                              want.dk.data(), want.dv.data(), c.n_heads, c.n_kv, c.hd, lay.seqs,
                              scale);
  // fp32: sums over up to n·group terms in a different order. bf16: the gradients are rounded
  // to bf16 (unit roundoff 2^-8) after an fp32 computation; on tensor cores P and dS are bf16
  // operands too, each term off by at most 2^-8 of itself, which sums to well under the
  // output's rounding at these magnitudes (|dS| sums to < 1 per row).
  const Tolerance tol = std::is_same_v<T, float> ? Tolerance{2e-5, 1e-4} : Tolerance{4e-3, 1e-2};
  for (const bool allow_tc : {true, false}) {
    if (!allow_tc && !std::is_same_v<T, bf16>) continue;  // fp32 has one path
    const Grads got = gpu_backward<T>(c, lay, q, k, v, d_out, scale, allow_tc);
    const std::string what = std::string("<") + type_name<T>() + "> hd " + std::to_string(c.hd) +
                             " heads " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv) +
                             (allow_tc ? "" : " (CUDA cores)");
    EXPECT_TRUE(all_close("dq" + what, got.dq, want.dq, ld_q, tol));
    EXPECT_TRUE(all_close("dk" + what, got.dk, want.dk, ld_kv, tol));
    EXPECT_TRUE(all_close("dv" + what, got.dv, want.dv, ld_kv, tol));
  }
}

template <class T>
class GpuAttentionBackward : public ::testing::Test {};
TYPED_TEST_SUITE(GpuAttentionBackward, ElementTypes);

TYPED_TEST(GpuAttentionBackward, StoriesShapeRaggedBatch) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu<TypeParam>({8, 4, 8, {37, 1, 64, 100}, 31});
}

TYPED_TEST(GpuAttentionBackward, Gqa1HeadDim64) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu<TypeParam>({4, 4, 64, {33, 129}, 32});
}

TYPED_TEST(GpuAttentionBackward, Gqa4HeadDim32) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu<TypeParam>({8, 2, 32, {70, 3}, 33});
}

TYPED_TEST(GpuAttentionBackward, Gqa8HeadDim128) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu<TypeParam>({16, 2, 128, {300, 5}, 34});
}

TYPED_TEST(GpuAttentionBackward, Sequence1024) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu<TypeParam>({8, 1, 64, {1024}, 35});
}

TYPED_TEST(GpuAttentionBackward, HeadDim256) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu<TypeParam>({4, 2, 256, {40, 9}, 36});
}

// The training shape (Qwen3-0.6B: 16 query heads over 8 KV heads, head_dim 128): whole 32-row
// tiles (256) and a ragged last tile (1000), several sequences per launch.
TYPED_TEST(GpuAttentionBackward, Gqa2HeadDim128Sequences256) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu<TypeParam>({4, 2, 128, {256, 256, 31}, 37});
}

TYPED_TEST(GpuAttentionBackward, Gqa2HeadDim128Sequence1000) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu<TypeParam>({4, 2, 128, {1000}, 38});
}

// No atomics: two launches on the same inputs give bitwise-equal gradients, in fp32 and on
// the tensor cores (bf16).
TYPED_TEST(GpuAttentionBackward, RepeatedLaunchesBitwiseEqual) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  const DenseCase c{4, 2, 64, {200, 77}, 39};
  const DenseLayout lay(c.lens);
  const auto q = quantize<T>(random_floats(size_t(lay.rows * c.n_heads * c.hd), 1));
  const auto k = quantize<T>(random_floats(size_t(lay.rows * c.n_kv * c.hd), 2));
  const auto v = quantize<T>(random_floats(size_t(lay.rows * c.n_kv * c.hd), 3));
  const auto d_out = quantize<T>(random_floats(size_t(lay.rows * c.n_heads * c.hd), 4));
  const Grads a = gpu_backward<T>(c, lay, q, k, v, d_out, 0.125f);
  const Grads b = gpu_backward<T>(c, lay, q, k, v, d_out, 0.125f);
  auto same = [](const char* name, const std::vector<float>& x, const std::vector<float>& y) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i]) && std::isnan(y[i])) continue;  // untouched sentinel rows
      ASSERT_EQ(x[i], y[i]) << name << " index " << i;
    }
  };
  same("dq", a.dq, b.dq);
  same("dk", a.dk, b.dk);
  same("dv", a.dv, b.dv);
}

// Which calls run on tensor cores is decided on the host: bf16, head_dim a multiple of 16 up to
// 128, every operand 16-byte aligned.
TEST(GpuAttentionBackwardPath, TensorCoresApplyToAlignedBf16HeadDimsUpTo128) {
  auto* aligned = reinterpret_cast<bf16*>(uintptr_t{0x1000});
  auto* odd = reinterpret_cast<bf16*>(uintptr_t{0x1008});
  const auto uses = [&](int64_t hd, bf16* dq) {
    return attention_backward_uses_tensor_cores<bf16>(aligned, aligned, aligned, aligned, dq,
                                                      aligned, aligned, hd);
  };
  for (int64_t hd : {16, 32, 64, 128}) EXPECT_TRUE(uses(hd, aligned)) << hd;
  for (int64_t hd : {8, 24, 256}) EXPECT_FALSE(uses(hd, aligned)) << hd;
  EXPECT_FALSE(uses(64, odd));
  auto* f = reinterpret_cast<float*>(uintptr_t{0x1000});
  EXPECT_FALSE(attention_backward_uses_tensor_cores<float>(f, f, f, f, f, f, f, 64));
}

// L = Σ W ⊙ attention(q, k, v) in double; the GPU's fp32 gradients must match central
// differences of L in every input element.
TEST(GpuAttentionBackwardFd, MatchesFiniteDifferences) {
  SPINDLE_REQUIRE_GPU();
  const DenseCase c{4, 2, 8, {5, 3}, 41};
  const DenseLayout lay(c.lens);
  const int64_t ld_q = c.n_heads * c.hd;
  const int64_t ld_kv = c.n_kv * c.hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  auto q = random_floats(size_t(lay.rows * ld_q), c.seed);
  auto k = random_floats(size_t(lay.rows * ld_kv), c.seed + 1);
  auto v = random_floats(size_t(lay.rows * ld_kv), c.seed + 2);
  const auto w = random_floats(size_t(lay.rows * ld_q), c.seed + 3);

  const auto loss = [&](const std::vector<double>& qd, const std::vector<double>& kd,
                        const std::vector<double>& vd) {
    double total = 0.0;
    const int64_t group = c.n_heads / c.n_kv;
    for (const DenseSeq& s : lay.seqs)
      for (int64_t t = 0; t < s.n; ++t)
        for (int64_t h = 0; h < c.n_heads; ++h) {
          const int64_t col_q = h * c.hd;
          const int64_t col_kv = (h / group) * c.hd;
          std::vector<double> p(static_cast<size_t>(t + 1));
          double m = -INFINITY;
          for (int64_t j = 0; j <= t; ++j) {
            double dot = 0.0;
            for (int64_t d = 0; d < c.hd; ++d)
              dot += qd[size_t((s.row_begin + t) * ld_q + col_q + d)] *
                     kd[size_t((s.row_begin + j) * ld_kv + col_kv + d)];
            p[size_t(j)] = scale * dot;
            m = std::max(m, p[size_t(j)]);
          }
          double sum = 0.0;
          for (double& x : p) sum += (x = std::exp(x - m));
          for (int64_t d = 0; d < c.hd; ++d) {
            double o = 0.0;
            for (int64_t j = 0; j <= t; ++j)
              o += p[size_t(j)] / sum * vd[size_t((s.row_begin + j) * ld_kv + col_kv + d)];
            total += w[size_t((s.row_begin + t) * ld_q + col_q + d)] * o;
          }
        }
    return total;
  };
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
  const double h = 1e-3;
  const auto fd = [&](std::vector<double>& x, size_t i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = loss(qd, kd, vd);
    x[i] = x0 - h;
    const double down = loss(qd, kd, vd);
    x[i] = x0;
    return (up - down) / (2 * h);
  };
  const Grads got = gpu_backward<float>(c, lay, q, k, v, w, scale);
  const auto check_all = [&](const char* name, std::vector<double>& x,
                             const std::vector<float>& grad, int64_t ld) {
    std::vector<float> want(x.size(), kSentinel);
    for (const DenseSeq& s : lay.seqs)
      for (int64_t r = s.row_begin; r < s.row_begin + s.n; ++r)
        for (int64_t col = 0; col < ld; ++col)
          want[size_t(r * ld + col)] = static_cast<float>(fd(x, size_t(r * ld + col)));
    EXPECT_TRUE(all_close(name, grad, want, ld, {1e-4, 1e-3}));
  };
  check_all("dq vs finite differences", qd, got.dq, ld_q);
  check_all("dk vs finite differences", kd, got.dk, ld_kv);
  check_all("dv vs finite differences", vd, got.dv, ld_kv);
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
