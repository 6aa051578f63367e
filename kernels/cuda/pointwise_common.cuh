#pragma once
// Device helpers shared by the pointwise CUDA kernels (norm, rope, activation, loss, sampling,
// adamw): fp32 loads/stores of float and bf16 elements, block-wide reductions and scans.
//
// Block-wide helpers must be called by every thread of the block (they synchronise) with a
// block size that is a multiple of 32 and at most 1024. Their results are deterministic: a
// fixed tree over a fixed thread assignment, no atomics.

#include <cuda_bf16.h>

#include <cstdint>

#include "device_common.cuh"
#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda::detail {

// Grid size for a grid-stride loop over `count` items with `threads` per block.
inline unsigned grid_for(int64_t count, int threads, int64_t max_blocks = 65535) {
  const int64_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

template <class V, class Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Reduces v over the block with op; every thread receives the result.
template <class V, class Op>
__device__ V block_reduce(V v, Op op) {
  __shared__ V warp_vals[32];
  __shared__ V result;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = static_cast<int>(blockDim.x >> 5);
  v = warp_reduce(v, op);
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    V acc = warp_vals[0];
    for (int i = 1; i < n_warps; ++i) acc = op(acc, warp_vals[i]);
    result = acc;
  }
  __syncthreads();
  const V out = result;
  __syncthreads();  // `result` and `warp_vals` may be reused by the next call
  return out;
}

struct SumOp {
  template <class V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ float block_sum(float v) {
  return block_reduce(v, SumOp{});
}
__device__ __forceinline__ double block_sum(double v) {
  return block_reduce(v, SumOp{});
}
__device__ __forceinline__ unsigned long long block_sum(unsigned long long v) {
  return block_reduce(v, SumOp{});
}
__device__ __forceinline__ float block_max(float v) {
  return block_reduce(v, MaxOp{});
}

// Exclusive prefix sum of v over the threads of the block in thread order; `total` receives the
// sum over the block.
__device__ inline unsigned long long block_exclusive_scan(unsigned long long v,
                                                          unsigned long long& total) {
  __shared__ unsigned long long warp_sums[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  unsigned long long inc = v;
  for (int off = 1; off < 32; off <<= 1) {
    const unsigned long long up = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += up;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  unsigned long long warp_base = 0;
  unsigned long long all = 0;
  for (int i = 0; i < n_warps; ++i) {
    if (i < warp) warp_base += warp_sums[i];
    all += warp_sums[i];
  }
  __syncthreads();  // warp_sums may be reused by the next call
  total = all;
  return warp_base + inc - v;
}

// Online log-sum-exp state: the row's running max m and Σ exp(x − m). -inf entries contribute
// nothing; a NaN entry makes s NaN.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ void online_add(MaxSum& a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.0f;  // a.m = -inf: a.s is 0 and expf(-inf) = 0
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += expf(x - a.m);
  }
}

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return MaxSum{m, 0.0f};
  const float sa = a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m);
  const float sb = b.m == -INFINITY ? 0.0f : b.s * expf(b.m - m);
  return MaxSum{m, sa + sb};
}

// Block-wide combine of MaxSum states (deterministic order).
__device__ inline MaxSum block_max_sum(MaxSum v) {
  __shared__ float ms[32];
  __shared__ float ss[32];
  __shared__ MaxSum result;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  for (int off = 16; off > 0; off >>= 1) {
    MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
    v = combine(v, o);
  }
  if (lane == 0) {
    ms[warp] = v.m;
    ss[warp] = v.s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum acc{ms[0], ss[0]};
    for (int i = 1; i < n_warps; ++i) acc = combine(acc, MaxSum{ms[i], ss[i]});
    result = acc;
  }
  __syncthreads();
  const MaxSum out = result;
  __syncthreads();
  return out;
}

}  // namespace spindle::kernels::cuda::detail
