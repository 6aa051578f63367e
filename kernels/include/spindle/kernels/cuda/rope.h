#pragma once
// Rotary position embedding on the GPU, in place (semantics of kernels/rope.h, both styles).

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"
#include "spindle/kernels/rope.h"

namespace spindle::kernels::cuda {

// x: [rows, n_heads, head_dim], row stride ld. pos: [rows] device. inv_freq: [head_dim/2]
// device fp32. Angles computed in fp32 as pos · inv_freq (sincosf), like the CPU kernel.
template <class T>
void rope(T* x, int64_t ld, int64_t rows, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style, bool inverse, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
