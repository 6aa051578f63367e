#pragma once
// Block bookkeeping of a paged KV cache (vLLM's block layout), with no storage: the sequences'
// block tables, block reference counts and the free list. engine::KvCache (host memory) and
// engine_cuda::DeviceKvCache (device memory) own one each and move the bytes themselves. Blocks are
// reference counted, so n samples of one prompt share the prompt's blocks (fork); a partially
// filled last block that is shared is copied only when its sequence writes into it
// (copy-on-write, the copy named by append's result). Full blocks stay shared for life.
//
// Threading: not thread-safe; one engine loop owns a table.

#include <cstdint>
#include <optional>
#include <vector>

namespace spindle::engine {

using SeqId = int32_t;

struct KvCacheOptions {
  int64_t block_size = 16;  // tokens per block
  int64_t n_blocks = 0;     // 0: enough for max_seqs sequences of max_seq_len tokens
  int64_t max_seqs = 4;     // only used to size n_blocks when n_blocks == 0
};

// A block whose first n_tokens token rows the caller must copy from block `from` to block `to`
// (all layers, K and V) before the new tokens are written.
struct KvBlockCopy {
  int32_t from = 0;
  int32_t to = 0;
  int64_t n_tokens = 0;
};

class KvBlockTable {
 public:
  // Checks block_size in [1, 1024] and n_blocks in [1, 2^30] after sizing n_blocks == 0 as
  // max_seqs sequences of max_seq_len tokens (invalid_argument otherwise).
  KvBlockTable(int64_t max_seq_len, KvCacheOptions options);

  SeqId create();
  // A new sequence sharing every block of `parent` (same length, same tokens).
  SeqId fork(SeqId parent);
  void release(SeqId seq);

  int64_t length(SeqId seq) const;
  const std::vector<int32_t>& block_table(SeqId seq) const;

  // Makes room for n more tokens of `seq`: allocates blocks and un-shares a shared, partially
  // filled last block (returned: the caller copies its bytes; the source block stays owned by
  // the other sequences, so its bytes are intact). Appends the flat cache slot
  // (block·block_size + offset) of each new token to `slots` and advances the length. Throws
  // resource when blocks run out (the table is left unchanged).
  std::optional<KvBlockCopy> append(SeqId seq, int64_t n, std::vector<int64_t>& slots);
  // Blocks that append(seq, n) would need to take from the free list.
  int64_t blocks_needed(SeqId seq, int64_t n) const;

  const KvCacheOptions& options() const { return options_; }  // n_blocks resolved
  int64_t block_size() const { return options_.block_size; }
  int64_t n_blocks() const { return options_.n_blocks; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t live_sequences() const;

 private:
  struct Seq {
    bool live = false;
    int64_t length = 0;
    std::vector<int32_t> blocks;
  };
  Seq& seq_ref(SeqId seq);
  const Seq& seq_ref(SeqId seq) const;
  bool must_copy_last(const Seq& s, int64_t n) const;
  int32_t take_block();
  void drop_block(int32_t block);

  KvCacheOptions options_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // stack of free block ids
  std::vector<Seq> seqs_;
  std::vector<SeqId> free_seq_ids_;
};

}  // namespace spindle::engine
