#pragma once
// Dense matrix products (CPU: OpenBLAS sgemm, own SIMD gemv). All matrices row-major fp32.

#include <cstdint>

namespace spindle::kernels {

// y[T, n] = x[T, k] · W[n, k]ᵀ + beta · y.  ldx, ldy are row strides in elements
// (ldx >= k, ldy >= n); W is dense [n, k]. beta = 0 overwrites y (y may be uninitialised).
// T <= 32 runs on SIMD gemv kernels that read W once (decode is bandwidth-bound), more rows
// on sgemm.
void linear(const float* x, int64_t ldx, int64_t T, int64_t k, const float* W, int64_t n, float* y,
            int64_t ldy, float beta);

enum class Trans : bool { no = false, yes = true };

// C[M, N] = alpha · op(A)[M, K] · op(B)[K, N] + beta · C  (a plain sgemm; for backward passes).
void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);

}  // namespace spindle::kernels
