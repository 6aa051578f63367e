#pragma once
// Internal to gemm.cu: the skinny path of cuda::linear<bf16> for decode batches (a few rows),
// where cuBLAS's GEMM kernels leave most of the memory bandwidth unused (measured on an H200:
// 7.2 us for a 1×1024·1024×1024 bf16 product whose weights take 0.5 us to read).

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda::detail {

inline constexpr int64_t kGemvMaxRows = 8;

// True when linear_gemv can run this call: 1 <= rows <= kGemvMaxRows, k a multiple of 8, x, W
// 16-byte aligned and ldx a multiple of 8 (16-byte vector loads of bf16).
bool gemv_applies(const bf16* x, int64_t ldx, int64_t rows, int64_t k, const bf16* W);

// y[rows, n] = x[rows, k] · W[n, k]ᵀ + beta · y, fp32 accumulation, one warp per output column.
void linear_gemv(const bf16* x, int64_t ldx, int64_t rows, int64_t k, const bf16* W, int64_t n,
                 bf16* y, int64_t ldy, float beta, cudaStream_t stream);

}  // namespace spindle::kernels::cuda::detail
