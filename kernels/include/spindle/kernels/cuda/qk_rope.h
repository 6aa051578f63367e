#pragma once
// The attention block's per-token steps between the q/k/v projections and attention, fused for
// inference: Qwen3's per-head RMSNorm of q and k, RoPE on q and k, and the write of k and v into
// the paged cache, in one launch instead of five. Results are bitwise those of cuda::rmsnorm →
// cuda::rope → cuda::kv_cache_write run one after the other (same expressions, same reduction
// tree, same roundings to T between the steps).

#include <cstdint>

#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/cuda/runtime.h"
#include "spindle/kernels/rope.h"

namespace spindle::kernels::cuda {

// q: [rows, n_heads, head_dim] (row stride ld_q), normed and rotated in place. k: [rows,
// n_kv_heads, head_dim] (row stride ld_kv), normed and rotated in place, then written with v
// (same row stride, unchanged) to the cache at flat slot[t] (device int64; a slot outside the
// cache is skipped, as in kv_cache_write). n_kv_heads and head_dim are the cache's; n_heads a
// multiple of n_kv_heads. q_norm / k_norm: [head_dim] fp32 device weights, both null (no norm,
// Llama) or both set (Qwen3). pos: [rows] int32 device; inv_freq: [head_dim/2] fp32 device.
// rows may be 0 (no-op). No statistics are kept (training runs the unfused steps).
template <class T>
void qk_norm_rope_kv_write(T* q, int64_t ld_q, int64_t n_heads, T* k, const T* v, int64_t ld_kv,
                           int64_t rows, const float* q_norm, const float* k_norm, float eps,
                           const int32_t* pos, const float* inv_freq, RopeStyle style,
                           const DevicePagedKv<T>& cache, const int64_t* slot, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
