#pragma once
// Paged KV cache (vLLM's block layout). Per layer, K and V are [n_blocks, block_size,
// n_kv_heads, head_dim] fp32. A sequence owns a block table; blocks are reference counted, so
// n samples of one prompt share the prompt's blocks (fork) and copy a partially filled last
// block only when they write into it (copy-on-write). Full blocks stay shared for life.
//
// Threading: not thread-safe; one engine loop owns a cache.

#include <cstdint>
#include <vector>

#include "spindle/core/tensor.h"
#include "spindle/engine/model_config.h"
#include "spindle/kernels/attention.h"

namespace spindle::engine {

using SeqId = int32_t;

struct KvCacheOptions {
  int64_t block_size = 16;  // tokens per block
  int64_t n_blocks = 0;     // 0: enough for max_seqs sequences of max_seq_len tokens
  int64_t max_seqs = 4;     // only used to size n_blocks when n_blocks == 0
};

class KvCache {
 public:
  KvCache(const ModelConfig& config, KvCacheOptions options);

  SeqId create();
  // A new sequence sharing every block of `parent` (same length, same tokens).
  SeqId fork(SeqId parent);
  void release(SeqId seq);

  int64_t length(SeqId seq) const;
  const std::vector<int32_t>& block_table(SeqId seq) const;

  // Makes room for n more tokens of `seq`: allocates blocks and un-shares a shared,
  // partially filled last block. Appends the flat cache slot (block·block_size + offset) of each
  // new token to `slots` and advances the length. Throws resource when blocks run out (the
  // cache is left unchanged).
  void append(SeqId seq, int64_t n, std::vector<int64_t>& slots);
  // Blocks that append(seq, n) would need to take from the free list.
  int64_t blocks_needed(SeqId seq, int64_t n) const;

  kernels::PagedKv layer(int64_t l);
  int64_t block_size() const { return options_.block_size; }
  int64_t n_blocks() const { return options_.n_blocks; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t live_sequences() const;
  size_t bytes() const { return size_t(k_.size()) * 2 * k_.front().bytes(); }

 private:
  struct Seq {
    bool live = false;
    int64_t length = 0;
    std::vector<int32_t> blocks;
  };
  Seq& seq_ref(SeqId seq);
  const Seq& seq_ref(SeqId seq) const;
  int32_t take_block();
  void drop_block(int32_t block);
  void copy_block(int32_t from, int32_t to, int64_t n_tokens);

  ModelConfig config_;
  KvCacheOptions options_;
  std::vector<Tensor> k_, v_;  // per layer
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // stack of free block ids
  std::vector<Seq> seqs_;
  std::vector<SeqId> free_seq_ids_;
};

}  // namespace spindle::engine
