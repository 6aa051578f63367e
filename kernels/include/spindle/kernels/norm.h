#pragma once
// RMSNorm: y = x / sqrt(mean(x²) + eps) · w, row-wise. Also used per head for Qwen3's q/k norms
// (rows = tokens × heads, n = head_dim). In-place (y == x) allowed.

#include <cstdint>

namespace spindle::kernels {

// x, y: [rows, n] with row stride ld (ld >= n); w: [n].
// If inv_rms is non-null it receives 1/sqrt(mean(x²)+eps) per row (kept for backward).
void rmsnorm(const float* x, int64_t ld_x, const float* w, float* y, int64_t ld_y, int64_t rows,
             int64_t n, float eps, float* inv_rms = nullptr);

}  // namespace spindle::kernels
