#pragma once
// Private to kernels/cuda/attention*.cu (element conversion and warp reductions come from
// device_common.cuh): the paged-cache address rule, host-side contract checks, and the launchers
// attention_paged dispatches to.

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "device_common.cuh"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda::detail {

// head_dim bound of every attention kernel: per-lane accumulators cover head_dim / 32 columns.
constexpr int kMaxHeadDim = 256;
constexpr int kColsPerLane = kMaxHeadDim / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Σ_d a[d]·b[d], a in shared memory (fp32), b a row of T in global memory.
template <class T>
__device__ __forceinline__ float dot_row(const float* a, const T* b, int hd) {
  float acc = 0.0f;
  for (int d = 0; d < hd; ++d) acc = fmaf(a[d], to_f32(b[d]), acc);
  return acc;
}

// Element offset of the cache row of sequence position `pos` (vLLM layout), KV head columns
// included via kv_col; -1 when the block-table entry lies outside [0, n_blocks) (a caller bug:
// the kernels then read that key and value as zeros instead of faulting).
__device__ __forceinline__ int64_t paged_offset(const int32_t* table, int64_t pos,
                                                int64_t block_size, int64_t n_blocks, int64_t width,
                                                int64_t kv_col) {
  const int64_t block = table[pos / block_size];
  if (block < 0 || block >= n_blocks) return -1;
  return (block * block_size + pos % block_size) * width + kv_col;
}

// Contract of attention_paged / _prefill / _decode checked on the host (everything that does
// not need the device-resident tables). Returns false when there is nothing to do.
template <class T>
bool check_paged_args(const char* kernel, const T* q, int64_t ld_q, const T* out, int64_t ld_out,
                      int64_t n_heads, const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs,
                      int32_t n_seqs, const int32_t* block_tables, int32_t max_new,
                      int32_t max_ctx) {
  SPINDLE_KERNEL_REQUIRE(cache.k != nullptr && cache.v != nullptr, kernel,
                         "cache.k and cache.v must be non-null");
  SPINDLE_KERNEL_REQUIRE(cache.n_blocks > 0 && cache.block_size > 0, kernel,
                         "cache.n_blocks > 0 and cache.block_size > 0");
  SPINDLE_KERNEL_REQUIRE(cache.n_kv_heads > 0, kernel, "cache.n_kv_heads > 0");
  SPINDLE_KERNEL_REQUIRE(
      cache.head_dim > 0 && cache.head_dim % 8 == 0 && cache.head_dim <= kMaxHeadDim, kernel,
      "head_dim must be a multiple of 8 in [8, 256]");
  SPINDLE_KERNEL_REQUIRE(n_heads > 0 && n_heads % cache.n_kv_heads == 0, kernel,
                         "n_heads must be a positive multiple of n_kv_heads");
  SPINDLE_KERNEL_REQUIRE(ld_q >= n_heads * cache.head_dim && ld_out >= n_heads * cache.head_dim,
                         kernel, "ld_q and ld_out must be >= n_heads * head_dim");
  SPINDLE_KERNEL_REQUIRE(n_seqs >= 0 && max_new >= 0, kernel, "n_seqs >= 0 and max_new >= 0");
  SPINDLE_KERNEL_REQUIRE(n_heads <= 65535, kernel, "n_heads must be <= 65535 (grid limit)");
  if (n_seqs == 0 || max_new == 0) return false;
  SPINDLE_KERNEL_REQUIRE(max_ctx >= max_new, kernel, "max_ctx >= max_new");
  SPINDLE_KERNEL_REQUIRE(
      q != nullptr && out != nullptr && seqs != nullptr && block_tables != nullptr, kernel,
      "q, out, seqs and block_tables must be non-null");
  return true;
}

// The launchers behind the public entry points (arguments already checked). The prefill launcher
// skips one-token sequences when skip_single is set (attention_paged hands those to decode), and
// runs bf16 on tensor cores where prefill_tc_applies unless allow_tensor_cores is false.
template <class T>
void launch_prefill(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                    const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                    const int32_t* block_tables, int32_t max_new, float scale, bool skip_single,
                    cudaStream_t stream, bool allow_tensor_cores = true);
// attention_prefill_tc.cu: the tensor-core prefill (bf16) and when it applies (head_dim a
// multiple of 16 in [16, 128], q and the caches 16-byte aligned, ld_q a multiple of 8).
bool prefill_tc_applies(const bf16* q, int64_t ld_q, const DevicePagedKv<bf16>& cache);
void launch_prefill_tc(const bf16* q, int64_t ld_q, bf16* out, int64_t ld_out, int64_t n_heads,
                       const DevicePagedKv<bf16>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                       const int32_t* block_tables, int32_t max_new, float scale, bool skip_single,
                       cudaStream_t stream);
// The backward's shape, shared by its CUDA-core and tensor-core kernels.
struct BwdShape {
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t group;
  int hd;
  int max_n;
  float scale;
};

// The softmax statistics both backward paths leave in the caller's scratch (the dq kernel
// writes, the dk/dv kernel reads): stats[((s·max_n + t)·n_heads + h)·2 + {0: lse, 1: D}].
__device__ __forceinline__ int64_t stat_index(const BwdShape& sh, int64_t s, int64_t t, int64_t h) {
  return ((s * sh.max_n + t) * sh.n_heads + h) * 2;
}

// attention_backward_tc.cu: the tensor-core backward (bf16) and when it applies (head_dim a
// multiple of 16 in [16, 128], every pointer 16-byte aligned). stats: the caller's scratch.
bool tc_backward_applies(const void* const* ptrs, int n_ptrs, int64_t head_dim);
void launch_backward_tc(const bf16* q, const bf16* k, const bf16* v, const bf16* d_out, bf16* dq,
                        bf16* dk, bf16* dv, const BwdShape& sh, const DenseSeq* seqs,
                        int32_t n_seqs, float* stats, cudaStream_t stream);
template <class T>
void launch_decode(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                   const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                   const int32_t* block_tables, int32_t max_ctx, float scale, void* scratch,
                   size_t scratch_size, cudaStream_t stream);

}  // namespace spindle::kernels::cuda::detail
