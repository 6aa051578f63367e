// Every kernel run on the scalar path and on the best vector path of this CPU: the two differ
// only by float summation order and the exp polynomial, so they agree to a few ulps.

#include <cmath>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "../../kernels/cpu/simd.h"
#include "kernel_test_util.h"
#include "spindle/kernels/activation.h"
#include "spindle/kernels/attention.h"
#include "spindle/kernels/lora.h"
#include "spindle/kernels/matmul.h"
#include "spindle/kernels/norm.h"
#include "spindle/kernels/softmax.h"

namespace spindle::kernels::test {
namespace {

// Runs `body` at the scalar level and at the detected level; returns both outputs.
template <class Body>
std::pair<std::vector<float>, std::vector<float>> scalar_and_best(Body body) {
  std::vector<float> scalar, best;
  {
    ScopedSimdLevel level(SimdLevel::scalar);
    scalar = body();
  }
  best = body();
  return {scalar, best};
}

class SimdAgreement : public ::testing::Test {
 protected:
  void SetUp() override {
    if (simd_level_detected() == SimdLevel::scalar) GTEST_SKIP() << "no vector path on this CPU";
  }
};

TEST_F(SimdAgreement, RmsnormSoftmaxSwiglu) {
  const int64_t rows = 7, n = 333;
  const auto x = random_floats(size_t(rows * n), 1, -4.0f, 4.0f);
  const auto w = random_floats(size_t(n), 2);
  const auto up = random_floats(x.size(), 3);
  auto [s, b] = scalar_and_best([&] {
    std::vector<float> y(x.size());
    rmsnorm(x.data(), n, w.data(), y.data(), n, rows, n, 1e-5f);
    return y;
  });
  EXPECT_TRUE(all_close(b, s, 1e-6, 1e-5));
  std::tie(s, b) = scalar_and_best([&] {
    std::vector<float> y(x.size());
    softmax(x.data(), y.data(), rows, n);
    return y;
  });
  EXPECT_TRUE(all_close(b, s, 1e-9, 1e-5));
  std::tie(s, b) = scalar_and_best([&] {
    std::vector<float> y(x.size());
    log_softmax(x.data(), y.data(), rows, n);
    return y;
  });
  EXPECT_TRUE(all_close(b, s, 1e-5, 1e-6));
  std::tie(s, b) = scalar_and_best([&] {
    std::vector<float> y(x.size());
    swiglu(x.data(), up.data(), y.data(), int64_t(x.size()));
    return y;
  });
  EXPECT_TRUE(all_close(b, s, 1e-7, 1e-6));
}

TEST_F(SimdAgreement, PagedAttention) {
  const int64_t n_heads = 8, n_kv = 2, hd = 40, bs = 5, n_blocks = 20;
  const auto k = random_floats(size_t(n_blocks * bs * n_kv * hd), 3);
  const auto v = random_floats(k.size(), 4);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.rbegin(), table.rend(), 0);  // blocks in reverse order
  const std::vector<AttnSeq> seqs{{0, 9, 30, table.data()}, {9, 1, 60, table.data() + 4}};
  const auto q = random_floats(size_t(10 * n_heads * hd), 5, -3.0f, 3.0f);
  auto kc = k, vc = v;
  const PagedKv cache{kc.data(), vc.data(), n_blocks, bs, n_kv, hd};
  const auto [s, b] = scalar_and_best([&] {
    std::vector<float> out(q.size());
    attention_paged(q.data(), n_heads * hd, out.data(), n_heads * hd, n_heads, cache, seqs,
                    1.0f / std::sqrt(float(hd)));
    return out;
  });
  EXPECT_TRUE(all_close(b, s, 1e-6, 1e-5));
}

TEST_F(SimdAgreement, LoraShrinkExpand) {
  const int64_t d_in = 96, d_out = 50, max_rank = 16, n_slots = 3;
  const auto A = random_floats(size_t(n_slots * max_rank * d_in), 6);
  const auto B = random_floats(size_t(n_slots * d_out * max_rank), 7);
  const std::vector<int32_t> rank{16, 8, 3};
  const std::vector<float> scale{2.0f, 0.5f, 1.0f};
  const LoraSlots slots{A.data(), B.data(), rank.data(), scale.data(),
                        n_slots,  max_rank, d_in,        d_out};
  const std::vector<LoraSegment> segs{{0, 1, 2}, {1, 21, 0}, {21, 24, 1}};
  const auto x = random_floats(size_t(24 * d_in), 8);
  const auto [s, b] = scalar_and_best([&] {
    std::vector<float> h(size_t(24 * max_rank), 0.0f), y(size_t(24 * d_out), 0.0f);
    lora_shrink(x.data(), d_in, slots, segs, h.data());
    lora_expand(h.data(), slots, segs, y.data(), d_out, 0);
    return y;
  });
  EXPECT_TRUE(all_close(b, s, 1e-4, 1e-5));
}

// linear() with 2..16 rows (gemv_multi) and 32 rows at every vector level this CPU has.
TEST_F(SimdAgreement, LinearFewRowsEveryLevel) {
  const int64_t k = 301, n = 75, ldx = 305, ldy = 77;
  const auto W = random_floats(size_t(n * k), 11);
  for (int64_t T : {2, 3, 4, 5, 7, 8, 13, 16, 32}) {
    const auto x = random_floats(size_t(T * ldx), uint32_t(12 + T));
    const auto y0 = random_floats(size_t(T * ldy), uint32_t(50 + T));
    const auto run = [&](SimdLevel level) {
      ScopedSimdLevel scoped(level);
      auto y = y0;
      linear(x.data(), ldx, T, k, W.data(), n, y.data(), ldy, /*beta=*/T % 2 == 0 ? 0.0f : 1.0f);
      return y;
    };
    const auto s = run(SimdLevel::scalar);
    for (SimdLevel level : {SimdLevel::avx2, SimdLevel::avx512}) {
      if (set_simd_level_for_testing(level) != level) continue;
      EXPECT_TRUE(all_close(run(level), s, 1e-5, 1e-5))
          << "T=" << T << " level=" << simd_level_name(level);
    }
  }
}

// The gemv_multi primitive itself, alpha != 1 and every tail: each level's table against the
// scalar one.
TEST_F(SimdAgreement, GemvMultiTablesAgree) {
  const int64_t lda = 40, ldx = 41, ldy = 23;
  const auto A = random_floats(size_t(23 * lda), 13), X = random_floats(size_t(9 * ldx), 14);
  const auto y0 = random_floats(size_t(9 * ldy), 15);
  std::vector<const simd::Ops*> tables{&simd::avx2_ops()};
  if (simd_level_detected() == SimdLevel::avx512) tables.push_back(&simd::avx512_ops());
  for (int64_t m : {1, 3, 4, 5, 8, 23})
    for (int64_t n : {1, 7, 8, 16, 17, 40})
      for (int64_t T : {1, 2, 3, 4, 5, 9})
        for (float beta : {0.0f, 0.5f}) {
          auto want = y0;
          simd::scalar_ops().gemv_multi(A.data(), lda, m, n, X.data(), ldx, T, 1.5f, beta,
                                        want.data(), ldy);
          for (const simd::Ops* ops : tables) {
            auto got = y0;
            ops->gemv_multi(A.data(), lda, m, n, X.data(), ldx, T, 1.5f, beta, got.data(), ldy);
            EXPECT_TRUE(all_close(got, want, 1e-5, 1e-5))
                << "m=" << m << " n=" << n << " T=" << T << " beta=" << beta;
          }
        }
}

}  // namespace
}  // namespace spindle::kernels::test
