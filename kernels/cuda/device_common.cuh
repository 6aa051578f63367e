#pragma once
// Device helpers every CUDA kernel file shares: fp32 views of float and bf16 elements (loads
// widen exactly, stores round to nearest even) and warp-wide reductions in a fixed shuffle
// order (deterministic). Kernel-family helpers build on these in attention_common.cuh,
// lora_common.cuh and pointwise_common.cuh.

#include <cuda_bf16.h>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda::detail {

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(bf16 x) {
  return __bfloat162float(x);
}

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

}  // namespace spindle::kernels::cuda::detail
