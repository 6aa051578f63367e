#pragma once
// RMSNorm: y = x / sqrt(mean(x²) + eps) · w, row-wise. Also used per head for Qwen3's q/k norms
// (rows = tokens × heads, n = head_dim). In-place (y == x) allowed.

#include <cstdint>

namespace spindle::kernels {

// x, y: [rows, n] with row stride ld (ld >= n); w: [n].
// If inv_rms is non-null it receives 1/sqrt(mean(x²)+eps) per row (kept for backward).
void rmsnorm(const float* x, int64_t ld_x, const float* w, float* y, int64_t ld_y, int64_t rows,
             int64_t n, float eps, float* inv_rms = nullptr);

// Backward of rmsnorm given the forward's x, w and inv_rms (y = w ⊙ x·inv_rms):
//   dx = inv_rms·(w ⊙ dy) − inv_rms³/n · x · Σ_j (w_j·dy_j·x_j)
// dx is written as dx = dx_new + beta_dx·dx (beta_dx 0 overwrites, 1 accumulates; dx may not
// alias x or dy). If dw is non-null, dw[j] += Σ_rows dy_j·x_j·inv_rms (full-parameter training).
void rmsnorm_backward(const float* x, int64_t ld_x, const float* w, const float* inv_rms,
                      const float* dy, int64_t ld_dy, float* dx, int64_t ld_dx, int64_t rows,
                      int64_t n, float beta_dx, float* dw = nullptr);

}  // namespace spindle::kernels
