#pragma once
// Internal to gemm.cu: the skinny path of cuda::linear<bf16> for decode batches (a few rows),
// where cuBLAS's GEMM kernels leave most of the memory bandwidth unused (measured on an H200:
// 7.2 us for a 1×1024·1024×1024 bf16 product whose weights take 0.5 us to read).

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda::detail {

inline constexpr int64_t kGemvMaxRows = 8;
inline constexpr int kGemvMaxOuts = 3;

// True when linear_gemv can run this call: 1 <= rows <= kGemvMaxRows, k a multiple of 8, x, W
// 16-byte aligned and ldx a multiple of 8 (16-byte vector loads of bf16).
bool gemv_applies(const bf16* x, int64_t ldx, int64_t rows, int64_t k, const bf16* W);

// One output of linear_gemv_multi: y[rows, n] (row stride ldy) = x · W[n, k]ᵀ + beta · y.
struct GemvOut {
  const bf16* W = nullptr;
  int64_t n = 0;
  bf16* y = nullptr;
  int64_t ldy = 0;
};

// y[rows, n] = x[rows, k] · W[n, k]ᵀ + beta · y, fp32 accumulation, one warp per output column.
void linear_gemv(const bf16* x, int64_t ldx, int64_t rows, int64_t k, const bf16* W, int64_t n,
                 bf16* y, int64_t ldy, float beta, cudaStream_t stream);

// 1..kGemvMaxOuts outputs sharing x in one launch (gemv_applies must hold for x and every W):
// the warps' columns run over the outputs' columns back to back, and each column is computed
// exactly as linear_gemv computes it, so the results are bitwise those of separate calls.
void linear_gemv_multi(const bf16* x, int64_t ldx, int64_t rows, int64_t k, const GemvOut* outs,
                       int count, float beta, cudaStream_t stream);

}  // namespace spindle::kernels::cuda::detail
