// linear (batch-1 gemv, few-row gemv_multi and sgemm paths) and gemm against a double-precision
// reference.

#include "spindle/kernels/matmul.h"
#include "kernel_test_util.h"

namespace spindle::kernels {
namespace {

using test::all_close;
using test::random_floats;

class Linear : public test::SimdLevelTest {};

// y[t, j] = Σ_i x[t, i]·W[j, i] + beta·y0[t, j], strided rows.
void check_linear(int64_t T, int64_t k, int64_t n, float beta, uint32_t seed) {
  const int64_t ldx = k + 3, ldy = n + 5;
  const auto x = random_floats(size_t(T * ldx), seed);
  const auto W = random_floats(size_t(n * k), seed + 1);
  auto y = random_floats(size_t(T * ldy), seed + 2);
  std::vector<double> want(y.begin(), y.end());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += double(x[size_t(t * ldx + i)]) * W[size_t(j * k + i)];
      want[size_t(t * ldy + j)] = acc + double(beta) * y[size_t(t * ldy + j)];
    }
  linear(x.data(), ldx, T, k, W.data(), n, y.data(), ldy, beta);
  EXPECT_TRUE(all_close(y.data(), want.data(), want.size(), 1e-4, 1e-5))
      << "T=" << T << " k=" << k << " n=" << n << " beta=" << beta;
}

TEST_P(Linear, BatchOneMatchesReferenceSmallAndParallel) {
  check_linear(1, 7, 5, 0.0f, 1);       // tails everywhere, serial
  check_linear(1, 130, 67, 1.0f, 2);    // accumulate, rows not a multiple of the block
  check_linear(1, 1024, 700, 0.0f, 3);  // large enough to run on the thread team
  check_linear(1, 1024, 700, 1.0f, 4);
}

TEST_P(Linear, BatchedMatchesReference) {
  check_linear(5, 33, 17, 0.0f, 5);
  check_linear(16, 64, 48, 1.0f, 6);
}

// 2..16 rows run on gemv_multi: register tiles of 4 W rows × up to 4 x rows, so odd n leaves
// row tails, odd T column tails, and odd k a masked tail (k = 7 is shorter than one vector).
TEST_P(Linear, FewRowsMatchReference) {
  for (int64_t T = 2; T <= 16; ++T) {
    const auto seed = uint32_t(100 + 10 * T);
    check_linear(T, 7, 5, 0.0f, seed);
    check_linear(T, 133, 67, 1.0f, seed + 3);
    check_linear(T, 64, 48, T % 2 == 0 ? 0.0f : 1.0f, seed + 6);
  }
  check_linear(8, 1023, 301, 1.0f, 7);  // large enough to run on the thread team
  check_linear(3, 1023, 301, 0.0f, 8);
}

// Around the cut-off between gemv_multi and sgemm (32 rows).
TEST_P(Linear, CutOffRowCountsMatchReference) {
  for (int64_t T : {31, 32, 33}) check_linear(T, 95, 37, T == 32 ? 0.0f : 1.0f, uint32_t(T));
}

// beta = 0 overwrites NaN in y, and the padding between rows of y (ldy > n) is never written.
TEST_P(Linear, FewRowsBetaZeroOverwritesNaNAndKeepsPadding) {
  const int64_t T = 5, k = 37, n = 11, ldx = 40, ldy = 14;
  const auto x = random_floats(size_t(T * ldx), 9), W = random_floats(size_t(n * k), 10);
  std::vector<float> y(size_t(T * ldy), std::numeric_limits<float>::quiet_NaN());
  linear(x.data(), ldx, T, k, W.data(), n, y.data(), ldy, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < ldy; ++j) {
      const float v = y[size_t(t * ldy + j)];
      if (j < n) {
        double want = 0;
        for (int64_t i = 0; i < k; ++i)
          want += double(x[size_t(t * ldx + i)]) * W[size_t(j * k + i)];
        EXPECT_NEAR(v, want, 1e-4 + 1e-5 * std::abs(want)) << "t=" << t << " j=" << j;
      } else {
        EXPECT_TRUE(std::isnan(v)) << "padding written at t=" << t << " j=" << j;
      }
    }
}

TEST_P(Linear, BetaZeroNeverReadsY) {
  const auto x = random_floats(64, 7), W = random_floats(64 * 300, 8);
  std::vector<float> y(300, std::numeric_limits<float>::quiet_NaN());
  linear(x.data(), 64, 1, 64, W.data(), 300, y.data(), 300, 0.0f);
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
}

SPINDLE_INSTANTIATE_SIMD_LEVELS(Linear);

TEST(Gemm, TransposesMatchReference) {
  const int64_t M = 6, N = 5, K = 7;
  const auto A = random_floats(size_t(M * K), 9), B = random_floats(size_t(K * N), 10);
  for (Trans ta : {Trans::no, Trans::yes})
    for (Trans tb : {Trans::no, Trans::yes}) {
      std::vector<float> C(size_t(M * N), 0.5f);
      std::vector<double> want(size_t(M * N));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < K; ++p) {
            const double a = ta == Trans::no ? A[size_t(i * K + p)] : A[size_t(p * M + i)];
            const double b = tb == Trans::no ? B[size_t(p * N + j)] : B[size_t(j * K + p)];
            acc += a * b;
          }
          want[size_t(i * N + j)] = 2.0 * acc + 0.5 * 0.5;
        }
      gemm(ta, tb, M, N, K, 2.0f, A.data(), ta == Trans::no ? K : M, B.data(),
           tb == Trans::no ? N : K, 0.5f, C.data(), N);
      EXPECT_TRUE(all_close(C.data(), want.data(), want.size(), 1e-5, 1e-5));
    }
}

TEST(Linear, RejectsBadShapes) {
  float x[4] = {}, W[4] = {}, y[4] = {};
  EXPECT_THROW(linear(x, 1, 1, 2, W, 2, y, 2, 0.0f), std::invalid_argument);  // ldx < k
  EXPECT_THROW(linear(x, 2, 1, 2, W, 0, y, 2, 0.0f), std::invalid_argument);  // n = 0
}

}  // namespace
}  // namespace spindle::kernels
