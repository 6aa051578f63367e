#pragma once
// RMSNorm on the GPU (semantics of kernels/norm.h). Norm weights w are fp32 in both modes;
// statistics in fp32. Also per head for Qwen3's q/k norms (rows = tokens × heads).

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda {

// y = x / sqrt(mean(x²) + eps) · w, row-wise; in place (y == x) allowed. inv_rms optional [rows].
template <class T>
void rmsnorm(const T* x, int64_t ld_x, const float* w, T* y, int64_t ld_y, int64_t rows,
             int64_t n, float eps, float* inv_rms, cudaStream_t stream);

// dx = dx_new + beta_dx·dx, dx_new = inv_rms·(w ⊙ dy) − inv_rms³/n · x · Σ_j(w_j·dy_j·x_j).
// dx may not alias x or dy. (No dw: the GPU trains adapters, never the norms.)
template <class T>
void rmsnorm_backward(const T* x, int64_t ld_x, const float* w, const float* inv_rms, const T* dy,
                      int64_t ld_dy, T* dx, int64_t ld_dx, int64_t rows, int64_t n, float beta_dx,
                      cudaStream_t stream);

}  // namespace spindle::kernels::cuda
