#pragma once
// Host-side pieces of a forward that engine::Model and engine_cuda::DeviceModel share, so that both
// reject the same batches with the same messages and lay out the same LoRA segments.

#include <cstdint>
#include <span>
#include <unordered_set>
#include <vector>

#include "spindle/core/error.h"
#include "spindle/engine/model.h"
#include "spindle/kernels/lora.h"

namespace spindle::engine {

// Checks a forward batch before anything is reserved: non-empty, each sequence with >= 1 token,
// no KV sequence twice, tokens in vocab, the context not exceeded, adapter slots occupied (or
// −1), and enough free KV blocks for the whole batch (resource). Throws invalid_argument
// otherwise. Cache: length / blocks_needed / free_blocks as KvCache; Lora: max_slots / occupied
// as LoraSlotPool (null: no adapters).
template <class Cache, class Lora>
void validate_forward_batch(const ModelConfig& c, std::span<const BatchSequence> batch,
                            const Cache& cache, const Lora* lora) {
  SPINDLE_CHECK(!batch.empty(), invalid_argument, "forward: empty batch");
  std::unordered_set<SeqId> seen;
  int64_t blocks = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchSequence& b = batch[i];
    SPINDLE_CHECK(!b.tokens.empty(), invalid_argument, "forward: sequence {} has no tokens", i);
    SPINDLE_CHECK(seen.insert(b.seq).second, invalid_argument,
                  "forward: KV sequence {} appears twice in one batch", b.seq);
    for (int32_t t : b.tokens) {
      SPINDLE_CHECK(t >= 0 && t < c.vocab_size, invalid_argument,
                    "forward: token id {} in sequence {} outside vocab [0, {})", t, i,
                    c.vocab_size);
    }
    const int64_t len = cache.length(b.seq);
    SPINDLE_CHECK(len + int64_t(b.tokens.size()) <= c.max_seq_len, invalid_argument,
                  "forward: sequence {} would reach {} tokens, the model's context is {}", i,
                  len + int64_t(b.tokens.size()), c.max_seq_len);
    if (b.slot >= 0) {
      SPINDLE_CHECK(lora != nullptr && b.slot < lora->max_slots() && lora->occupied(b.slot),
                    invalid_argument, "forward: sequence {} uses adapter slot {}, which holds no "
                    "adapter", i, b.slot);
    } else {
      SPINDLE_CHECK(b.slot == -1, invalid_argument, "forward: adapter slot {} (use -1 for base)",
                    b.slot);
    }
    blocks += cache.blocks_needed(b.seq, int64_t(b.tokens.size()));
  }
  SPINDLE_CHECK(blocks <= cache.free_blocks(), resource,
                "forward: batch needs {} KV blocks, {} free", blocks, cache.free_blocks());
}

// Appends rows [begin, end) of adapter `slot`, extending the last segment when it continues it.
inline void append_segment(std::vector<kernels::LoraSegment>& segs, int64_t begin, int64_t end,
                           int32_t slot) {
  if (!segs.empty() && segs.back().slot == slot && segs.back().row_end == begin) {
    segs.back().row_end = end;
  } else {
    segs.push_back({begin, end, slot});
  }
}

}  // namespace spindle::engine
