#pragma once
// Private to kernels/cuda: the one RoPE rotation kernel behind cuda::rope (rope.cu) and
// cuda::mla_rope (mla.cu). Arguments already checked by the caller.

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda::detail {

// For each row r and block h < heads: rotates the `dim` columns at x[r·ld + h·head_stride +
// head_off ...] (pairs (i, i + dim/2) when half_style, else (2i, 2i+1)) by pos[r]·inv_freq[i]
// (the inverse rotation when `inverse`), then multiplies the pair by `factor` unless it is 1.
// Queued on `stream`; the caller checks the launch.
template <class T>
void launch_rope(T* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_stride,
                 int64_t head_off, int64_t dim, const int32_t* pos, const float* inv_freq,
                 bool half_style, bool inverse, float factor, cudaStream_t stream);

}  // namespace spindle::kernels::cuda::detail
