#pragma once
// Paged KV cache (vLLM's block layout). Per layer, K and V are [n_blocks, block_size,
// n_kv_heads, head_dim] fp32; for MLA one latent tensor [n_blocks, block_size, 1,
// kv_lora_rank + qk_rope_head_dim] (ModelConfig::kv_cache_*) serves as both. The block tables,
// reference counts, fork and copy-on-write are KvBlockTable's (kv_blocks.h); this class holds the
// bytes and performs its block copies.
//
// Threading: not thread-safe; one engine loop owns a cache.

#include <cstdint>
#include <vector>

#include "spindle/core/tensor.h"
#include "spindle/engine/device.h"
#include "spindle/engine/kv_blocks.h"
#include "spindle/engine/model_config.h"
#include "spindle/kernels/attention.h"

namespace spindle::engine {

// The CPU implementation of the KvPool interface (device.h).
class KvCache final : public KvPool {
 public:
  KvCache(const ModelConfig& config, KvCacheOptions options);

  Device device() const override { return {}; }
  SeqId create() override { return blocks_.create(); }
  // A new sequence sharing every block of `parent` (same length, same tokens).
  SeqId fork(SeqId parent) override { return blocks_.fork(parent); }
  void release(SeqId seq) override { blocks_.release(seq); }

  int64_t length(SeqId seq) const override { return blocks_.length(seq); }
  const std::vector<int32_t>& block_table(SeqId seq) const { return blocks_.block_table(seq); }

  // Makes room for n more tokens of `seq`: allocates blocks and un-shares a shared,
  // partially filled last block. Appends the flat cache slot (block·block_size + offset) of each
  // new token to `slots` and advances the length. Throws resource when blocks run out (the
  // cache is left unchanged).
  void append(SeqId seq, int64_t n, std::vector<int64_t>& slots);
  // Blocks that append(seq, n) would need to take from the free list.
  int64_t blocks_needed(SeqId seq, int64_t n) const override {
    return blocks_.blocks_needed(seq, n);
  }

  kernels::PagedKv layer(int64_t l);
  int64_t block_size() const override { return blocks_.block_size(); }
  int64_t n_blocks() const override { return blocks_.n_blocks(); }
  int64_t free_blocks() const override { return blocks_.free_blocks(); }
  int64_t live_sequences() const { return blocks_.live_sequences(); }
  size_t bytes() const override;

 private:
  void copy_block(const KvBlockCopy& copy);

  ModelConfig config_;
  KvBlockTable blocks_;
  std::vector<Tensor> k_, v_;  // per layer (v_ empty for MLA)
};

}  // namespace spindle::engine
