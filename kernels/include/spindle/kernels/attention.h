#pragma once
// Causal grouped-query attention over a paged KV cache (the vLLM layout).
//
// Cache layout, one layer: k, v = [n_blocks, block_size, n_kv_heads, head_dim] fp32. A token of
// a sequence at position p lives in block block_table[p / block_size], offset p % block_size.
// Query head h reads KV head h / (n_heads / n_kv_heads).

#include <cstdint>
#include <span>

namespace spindle::kernels {

struct PagedKv {
  float* k = nullptr;
  float* v = nullptr;
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

// One sequence of a ragged batch.
struct AttnSeq {
  int64_t row_begin = 0;  // first row of this sequence's new tokens in q / out
  int64_t n_new = 0;      // new tokens (queries), rows [row_begin, row_begin + n_new)
  int64_t n_past = 0;     // tokens already cached before them; query j sits at n_past + j
  const int32_t* block_table = nullptr;  // covers positions [0, n_past + n_new)
};

// Writes k_new/v_new rows [T, n_kv_heads·head_dim] (row stride ld) into the cache at the flat
// slots slot[t] = block · block_size + offset.
void kv_cache_write(const PagedKv& cache, const float* k_new, const float* v_new, int64_t ld,
                    int64_t T, const int64_t* slot);

// out[t, h·head_dim + d] = Σ_j softmax_j(scale · q_t,h · k_j) · v_j,  over j in
// [0, n_past + t_local], for each sequence. q, out: [T, n_heads, head_dim] with row strides
// ld_q, ld_out. The new tokens' K/V must already be in the cache.
void attention_paged(const float* q, int64_t ld_q, float* out, int64_t ld_out, int64_t n_heads,
                     const PagedKv& cache, std::span<const AttnSeq> seqs, float scale);

// A training sequence: rows [row_begin, row_begin + n) hold its tokens at positions 0..n−1.
struct DenseSeq {
  int64_t row_begin = 0;
  int64_t n = 0;
};

// Backward of causal GQA attention for training batches, where each sequence starts at position
// 0 and its K/V are the dense rows of k, v (the forward's post-RoPE K and V, the same values the
// cache held). Recomputes the attention weights from q and k. Dense row-major layouts:
// q, d_out, dq: [T, n_heads·head_dim]; k, v, dk, dv: [T, n_kv_heads·head_dim]. dq, dk, dv are
// overwritten (rows outside every sequence are left untouched).
void attention_backward(const float* q, const float* k, const float* v, const float* d_out,
                        float* dq, float* dk, float* dv, int64_t n_heads, int64_t n_kv_heads,
                        int64_t head_dim, std::span<const DenseSeq> seqs, float scale);

}  // namespace spindle::kernels
