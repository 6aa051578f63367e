#pragma once
// Internal vector primitives of the CPU kernels (not installed, not part of the contracts).
//
// Each primitive has a scalar, an AVX2+FMA and an AVX-512 implementation; the table of the
// level in use (cpu_features.h) is chosen once and read through one atomic pointer, so a call
// costs one indirect jump. Sizes are element counts; no alignment is required. Sums are
// accumulated in float in every path (llama2.c accumulates in float too); vector paths split a
// sum over lanes, so they differ from the scalar order by rounding only. exp in the vector paths
// is a Cephes-style polynomial (max error about 2 ulp, results below ~1e-45 flush to 0); the
// scalar path calls expf.

#include <cstdint>

#include "spindle/kernels/cpu_features.h"

namespace spindle::kernels::simd {

// One implementation of every primitive. Preconditions (n >= 0, valid pointers) are the
// caller's: primitives never check.
struct Ops {
  // Σ a[i]·b[i].
  float (*dot)(const float* a, const float* b, int64_t n);
  // y[i] += a·x[i].
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // x[i] *= a.
  void (*scale)(float a, float* x, int64_t n);
  // Σ x[i]².
  float (*sum_squares)(const float* x, int64_t n);
  // max x[i]; n >= 1.
  float (*max)(const float* x, int64_t n);
  // y[i] = exp(x[i] - shift) when y is non-null (y may alias x); returns Σ exp(x[i] - shift).
  float (*exp_sum)(const float* x, float shift, float* y, int64_t n);
  // out[i] = (g·(1/(1 + exp(-g))))·up[i] with g = gate[i]; out may alias gate or up.
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  // y[i] = alpha·dot(A[i·lda, 0:n], x) + beta·y[i] for i < m; beta == 0 never reads y.
  // Fast both for few long rows (LoRA shrink) and many short rows (LoRA expand, q·k).
  void (*gemv)(const float* A, int64_t lda, int64_t m, int64_t n, const float* x, float alpha,
               float beta, float* y);
  // y[0:n] += Σ_{i<m} a[i]·rows[i·ld, 0:n]  (attention's p·V over one block).
  void (*axpy_rows)(const float* a, const float* rows, int64_t ld, int64_t m, int64_t n, float* y);
  // gemv against T vectors at once: Y[t·ldy + i] = alpha·dot(A[i·lda, 0:n], X[t·ldx, 0:n]) +
  // beta·Y[t·ldy + i] for i < m, t < T; beta == 0 never reads Y. Each row of A is read from
  // memory once and used for every t (a decode batch of a few rows costs about one gemv), so
  // callers keep X small (T·n floats fit in L2).
  void (*gemv_multi)(const float* A, int64_t lda, int64_t m, int64_t n, const float* X, int64_t ldx,
                     int64_t T, float alpha, float beta, float* Y, int64_t ldy);
};

// The table in use (see cpu_features.h for how it is chosen).
const Ops& ops() noexcept;

// Per-level tables; avx2_ops()/avx512_ops() may be called only on CPUs that support them.
const Ops& scalar_ops() noexcept;
const Ops& avx2_ops() noexcept;
const Ops& avx512_ops() noexcept;

inline float dot(const float* a, const float* b, int64_t n) {
  return ops().dot(a, b, n);
}
inline void axpy(float a, const float* x, float* y, int64_t n) {
  ops().axpy(a, x, y, n);
}
inline void scale(float a, float* x, int64_t n) {
  ops().scale(a, x, n);
}
inline float sum_squares(const float* x, int64_t n) {
  return ops().sum_squares(x, n);
}
inline float max(const float* x, int64_t n) {
  return ops().max(x, n);
}
inline float exp_sum(const float* x, float shift, float* y, int64_t n) {
  return ops().exp_sum(x, shift, y, n);
}
inline void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  ops().silu_mul(gate, up, out, n);
}
inline void gemv(const float* A, int64_t lda, int64_t m, int64_t n, const float* x, float alpha,
                 float beta, float* y) {
  ops().gemv(A, lda, m, n, x, alpha, beta, y);
}
inline void axpy_rows(const float* a, const float* rows, int64_t ld, int64_t m, int64_t n,
                      float* y) {
  ops().axpy_rows(a, rows, ld, m, n, y);
}
inline void gemv_multi(const float* A, int64_t lda, int64_t m, int64_t n, const float* X,
                       int64_t ldx, int64_t T, float alpha, float beta, float* Y, int64_t ldy) {
  ops().gemv_multi(A, lda, m, n, X, ldx, T, alpha, beta, Y, ldy);
}

}  // namespace spindle::kernels::simd
