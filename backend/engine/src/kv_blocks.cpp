#include "spindle/engine/kv_blocks.h"

#include <algorithm>

#include "spindle/core/error.h"

namespace spindle::engine {

KvBlockTable::KvBlockTable(int64_t max_seq_len, KvCacheOptions options) : options_(options) {
  SPINDLE_CHECK(options_.block_size >= 1 && options_.block_size <= 1024, invalid_argument,
                "KV cache block_size must be in [1, 1024], got {}", options_.block_size);
  if (options_.n_blocks == 0) {
    const int64_t per_seq = (max_seq_len + options_.block_size - 1) / options_.block_size;
    options_.n_blocks = per_seq * std::max<int64_t>(1, options_.max_seqs);
  }
  SPINDLE_CHECK(options_.n_blocks >= 1 && options_.n_blocks <= (int64_t(1) << 30),
                invalid_argument, "KV cache n_blocks must be in [1, 2^30], got {}",
                options_.n_blocks);
  refcount_.assign(size_t(options_.n_blocks), 0);
  free_.reserve(size_t(options_.n_blocks));
  for (int64_t b = options_.n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

KvBlockTable::Seq& KvBlockTable::seq_ref(SeqId seq) {
  SPINDLE_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live,
                invalid_argument, "KV cache: no live sequence {}", seq);
  return seqs_[size_t(seq)];
}

const KvBlockTable::Seq& KvBlockTable::seq_ref(SeqId seq) const {
  return const_cast<KvBlockTable*>(this)->seq_ref(seq);
}

SeqId KvBlockTable::create() {
  SeqId id;
  if (!free_seq_ids_.empty()) {
    id = free_seq_ids_.back();
    free_seq_ids_.pop_back();
  } else {
    id = SeqId(seqs_.size());
    seqs_.emplace_back();
  }
  seqs_[size_t(id)] = Seq{.live = true, .length = 0, .blocks = {}};
  return id;
}

SeqId KvBlockTable::fork(SeqId parent) {
  const Seq copy = seq_ref(parent);
  const SeqId id = create();
  seqs_[size_t(id)] = copy;
  for (int32_t b : copy.blocks) ++refcount_[size_t(b)];
  return id;
}

void KvBlockTable::release(SeqId seq) {
  Seq& s = seq_ref(seq);
  for (int32_t b : s.blocks) drop_block(b);
  s = Seq{};
  free_seq_ids_.push_back(seq);
}

int64_t KvBlockTable::length(SeqId seq) const { return seq_ref(seq).length; }

const std::vector<int32_t>& KvBlockTable::block_table(SeqId seq) const {
  return seq_ref(seq).blocks;
}

int64_t KvBlockTable::live_sequences() const {
  int64_t n = 0;
  for (const Seq& s : seqs_) n += s.live ? 1 : 0;
  return n;
}

bool KvBlockTable::must_copy_last(const Seq& s, int64_t n) const {
  return n > 0 && s.length % options_.block_size != 0 && refcount_[size_t(s.blocks.back())] > 1;
}

int64_t KvBlockTable::blocks_needed(SeqId seq, int64_t n) const {
  const Seq& s = seq_ref(seq);
  const int64_t bs = options_.block_size;
  const int64_t have = int64_t(s.blocks.size());
  const int64_t need = (s.length + n + bs - 1) / bs;
  int64_t extra = std::max<int64_t>(0, need - have);
  // A shared, partially filled last block is copied before it is written.
  if (must_copy_last(s, n)) ++extra;
  return extra;
}

int32_t KvBlockTable::take_block() {
  SPINDLE_ASSERT(!free_.empty());
  const int32_t b = free_.back();
  free_.pop_back();
  refcount_[size_t(b)] = 1;
  return b;
}

void KvBlockTable::drop_block(int32_t block) {
  SPINDLE_ASSERT(refcount_[size_t(block)] > 0);
  if (--refcount_[size_t(block)] == 0) free_.push_back(block);
}

std::optional<KvBlockCopy> KvBlockTable::append(SeqId seq, int64_t n,
                                                std::vector<int64_t>& slots) {
  SPINDLE_CHECK(n >= 0, invalid_argument, "KV cache append of {} tokens", n);
  const int64_t needed = blocks_needed(seq, n);
  SPINDLE_CHECK(needed <= free_blocks(), resource,
                "KV cache full: sequence {} needs {} more blocks of {} tokens, {} free of {}", seq,
                needed, options_.block_size, free_blocks(), options_.n_blocks);
  Seq& s = seq_ref(seq);
  const int64_t bs = options_.block_size;
  std::optional<KvBlockCopy> copy;
  if (must_copy_last(s, n)) {
    // The shared source keeps a reference from its other sequences, so it is not freed here.
    const int32_t fresh = take_block();
    copy = KvBlockCopy{.from = s.blocks.back(), .to = fresh, .n_tokens = s.length % bs};
    drop_block(s.blocks.back());
    s.blocks.back() = fresh;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = s.length + i;
    if (pos / bs >= int64_t(s.blocks.size())) s.blocks.push_back(take_block());
    slots.push_back(int64_t(s.blocks[size_t(pos / bs)]) * bs + pos % bs);
  }
  s.length += n;
  return copy;
}

}  // namespace spindle::engine
