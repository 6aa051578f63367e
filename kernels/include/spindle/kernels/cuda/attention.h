#pragma once
// Causal grouped-query attention on the GPU over a paged KV cache (semantics of
// kernels/attention.h: the vLLM block layout, query head h reads KV head h / (n_heads /
// n_kv_heads)). The cache holds T (bf16 in the default mode, float in the fp32 mode); softmax
// statistics and accumulation are fp32. head_dim in {32, 48, 64, 80, 96, 128} and any value
// <= 256 that is a multiple of 8 (small models: stories260K has head_dim 8 — must work too).

#include <cstdint>

#include "spindle/kernels/attention.h"
#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda {

template <class T>
struct DevicePagedKv {
  T* k = nullptr;  // [n_blocks, block_size, n_kv_heads, head_dim] device
  T* v = nullptr;
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

// One sequence of a ragged batch (device array). Its block table is
// block_tables[table_offset .. table_offset + ceil((n_past + n_new)/block_size)).
struct DeviceAttnSeq {
  int64_t row_begin = 0;
  int32_t n_new = 0;
  int32_t n_past = 0;
  int32_t table_offset = 0;
};

// Writes rows [rows, n_kv_heads·head_dim] (row stride ld) into the cache at flat slots
// slot[t] = block·block_size + offset (device int64 array).
template <class T>
void kv_cache_write(const DevicePagedKv<T>& cache, const T* k_new, const T* v_new, int64_t ld,
                    int64_t rows, const int64_t* slot, cudaStream_t stream);

// out[t, h, :] = Σ_j softmax_j(scale · q_t,h · k_j) · v_j over j in [0, n_past + t_local].
// seqs: [n_seqs] device; max_new = max n_new over the seqs (host-known, sizes the grid);
// max_ctx = max n_past + n_new. Dispatches rows of one-token sequences to a split-KV decode
// kernel and longer ones to a tiled flash-style prefill kernel (both are exposed below for
// tests and benches). The new tokens' K/V must already be in the cache.
// `scratch` is device memory of at least attention_scratch_bytes(n_seqs, n_heads, n_kv_heads,
// head_dim, max_ctx) bytes (the split-KV partials of the decode rows; null when that is 0),
// passed by the caller so that a call never allocates (CUDA graphs capture no allocation).
// scratch_bytes is its size (invalid_argument when too small). attention_prefill needs none.
size_t attention_scratch_bytes(int32_t n_seqs, int64_t n_heads, int64_t n_kv_heads,
                               int64_t head_dim, int32_t max_ctx);
template <class T>
void attention_paged(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                     const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                     const int32_t* block_tables, int32_t max_new, int32_t max_ctx, float scale,
                     void* scratch, size_t scratch_bytes, cudaStream_t stream);
// Prefill rows (here and inside attention_paged) run on tensor cores in bf16 where head_dim is
// a multiple of 16 up to 128, q and the caches are 16-byte aligned and ld_q a multiple of 8
// (WMMA tiles, FlashAttention-2's forward: P rounded to bf16 as the P·V operand, scores,
// statistics and the accumulator fp32); allow_tensor_cores = false forces the CUDA cores.
template <class T>
void attention_prefill(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                       const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                       const int32_t* block_tables, int32_t max_new, int32_t max_ctx, float scale,
                       cudaStream_t stream, bool allow_tensor_cores = true);
// Whether attention_prefill<T> (and attention_paged's prefill rows) with these operands run on
// tensor cores.
template <class T>
bool attention_prefill_uses_tensor_cores(const T* q, int64_t ld_q, const DevicePagedKv<T>& cache);
template <class T>
void attention_decode(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                      const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                      const int32_t* block_tables, int32_t max_ctx, float scale, void* scratch,
                      size_t scratch_bytes, cudaStream_t stream);

// Backward for training batches (every sequence starts at position 0, dense K/V rows), as
// kernels/attention.h attention_backward: q, d_out, dq: [rows, n_heads·head_dim]; k, v, dk, dv:
// [rows, n_kv_heads·head_dim], dense. dq, dk, dv overwritten (rows outside sequences untouched).
// seqs: [n_seqs] device (kernels::DenseSeq); max_n = max sequence length. `scratch`: caller-owned
// device memory of at least attention_backward_scratch_bytes(n_seqs, max_n, n_heads) bytes (the
// softmax statistics the dq kernel hands the dk/dv kernel), scratch_bytes its size
// (invalid_argument when too small); the kernels never allocate.
// bf16 calls with head_dim a multiple of 16 up to 128 and 16-byte aligned operands run on tensor
// cores (WMMA tiles, FlashAttention-2's scheme: P and dS rounded to bf16 as operands of the
// products that consume them, everything else fp32), unless allow_tensor_cores is false; the
// rest (and the fp32 exactness mode) run the CUDA-core kernels. Both are deterministic.
size_t attention_backward_scratch_bytes(int32_t n_seqs, int32_t max_n, int64_t n_heads);
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* d_out, T* dq, T* dk, T* dv,
                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, const DenseSeq* seqs,
                        int32_t n_seqs, int32_t max_n, float scale, void* scratch,
                        size_t scratch_bytes, cudaStream_t stream, bool allow_tensor_cores = true);
// Whether attention_backward<T> with these operands runs on tensor cores.
template <class T>
bool attention_backward_uses_tensor_cores(const T* q, const T* k, const T* v, const T* d_out,
                                          const T* dq, const T* dk, const T* dv, int64_t head_dim);

}  // namespace spindle::kernels::cuda
