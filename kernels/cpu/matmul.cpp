#include "spindle/kernels/matmul.h"

#include <cblas.h>

#include <algorithm>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {
namespace {

// linear() runs our SIMD kernels up to this many rows of x and OpenBLAS sgemm above: where
// sgemm caught up on a Qwen3-0.6B-shaped layer on Zen 4 (docs/decisions.md).
constexpr int64_t kLinearSimdMaxRows = 32;

}  // namespace

void linear(const float* x, int64_t ldx, int64_t T, int64_t k, const float* W, int64_t n, float* y,
            int64_t ldy, float beta) {
  SPINDLE_KERNEL_REQUIRE(T >= 0 && k > 0 && n > 0, "linear", "T >= 0, k > 0, n > 0");
  SPINDLE_KERNEL_REQUIRE(ldx >= k && ldy >= n, "linear", "ldx >= k and ldy >= n");
  if (T == 0) return;
  if (T <= kLinearSimdMaxRows) {
    // Few rows (decode): bandwidth-bound, so W should stream from memory once. Our own kernels
    // over contiguous row blocks of W, one block per job: gemv for one row (four W rows share
    // each load of x; measured 0.75 of the bandwidth bound vs 0.55 for OpenBLAS's sgemv on a
    // Qwen3-0.6B-shaped decode), gemv_multi for 2..kLinearSimdMaxRows rows (each block of W is
    // used for every row of x while it sits in L1/L2). sgemm would repack all of W per call.
    constexpr int64_t kRowsPerJob = 64;
    const int64_t jobs = (n + kRowsPerJob - 1) / kRowsPerJob;
    const simd::Ops& ops = simd::ops();
    cpu::parallel_for(jobs, cpu::worth_parallel(n * k * T), cpu::Schedule::static_, [&](int64_t j) {
      const int64_t r0 = j * kRowsPerJob;
      const int64_t rows = std::min(kRowsPerJob, n - r0);
      if (T == 1) {
        ops.gemv(W + r0 * k, k, rows, k, x, 1.0f, beta, y + r0);
      } else {
        ops.gemv_multi(W + r0 * k, k, rows, k, x, ldx, T, 1.0f, beta, y + r0, ldy);
      }
    });
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(T), blasint(n), blasint(k), 1.0f, x,
              blasint(ldx), W, blasint(k), beta, y, blasint(ldy));
}

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  SPINDLE_KERNEL_REQUIRE(M >= 0 && N >= 0 && K >= 0, "gemm", "non-negative sizes");
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a == Trans::yes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::yes ? CblasTrans : CblasNoTrans, blasint(M), blasint(N), blasint(K),
              alpha, A, blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
}

}  // namespace spindle::kernels
