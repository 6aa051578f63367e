#include "spindle/gpu/device_kv_cache.h"

#include <algorithm>

#include "spindle/core/error.h"

namespace spindle::gpu {

namespace cuda = kernels::cuda;

DeviceKvCache::DeviceKvCache(const engine::ModelConfig& config, engine::KvCacheOptions options,
                             Precision precision)
    : config_(config), options_(options), precision_(precision) {
  SPINDLE_CHECK(options_.block_size >= 1 && options_.block_size <= 1024, invalid_argument,
                "KV cache block_size must be in [1, 1024], got {}", options_.block_size);
  if (options_.n_blocks == 0) {
    const int64_t per_seq = (config_.max_seq_len + options_.block_size - 1) / options_.block_size;
    options_.n_blocks = per_seq * std::max<int64_t>(1, options_.max_seqs);
  }
  SPINDLE_CHECK(options_.n_blocks >= 1 && options_.n_blocks <= (int64_t(1) << 30),
                invalid_argument, "KV cache n_blocks must be in [1, 2^30], got {}",
                options_.n_blocks);
  const int64_t rows = options_.n_blocks * options_.block_size;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    k_.emplace_back(rows, config_.kv_dim(), precision_);
    v_.emplace_back(rows, config_.kv_dim(), precision_);
    // Zeroed once: attention kernels may load whole blocks and mask the unused rows, which
    // must then hold finite values.
    k_.back().zero();
    v_.back().zero();
  }
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (KV cache zeroing)");
  refcount_.assign(size_t(options_.n_blocks), 0);
  free_.reserve(size_t(options_.n_blocks));
  for (int64_t b = options_.n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

DeviceKvCache::Seq& DeviceKvCache::seq_ref(SeqId seq) {
  SPINDLE_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live,
                invalid_argument, "KV cache: no live sequence {}", seq);
  return seqs_[size_t(seq)];
}

const DeviceKvCache::Seq& DeviceKvCache::seq_ref(SeqId seq) const {
  return const_cast<DeviceKvCache*>(this)->seq_ref(seq);
}

SeqId DeviceKvCache::create() {
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

SeqId DeviceKvCache::fork(SeqId parent) {
  const Seq copy = seq_ref(parent);
  const SeqId id = create();
  seqs_[size_t(id)] = copy;
  for (int32_t b : copy.blocks) ++refcount_[size_t(b)];
  return id;
}

void DeviceKvCache::release(SeqId seq) {
  Seq& s = seq_ref(seq);
  for (int32_t b : s.blocks) drop_block(b);
  s = Seq{};
  free_seq_ids_.push_back(seq);
}

int64_t DeviceKvCache::length(SeqId seq) const { return seq_ref(seq).length; }

const std::vector<int32_t>& DeviceKvCache::block_table(SeqId seq) const {
  return seq_ref(seq).blocks;
}

int64_t DeviceKvCache::live_sequences() const {
  int64_t n = 0;
  for (const Seq& s : seqs_) n += s.live ? 1 : 0;
  return n;
}

size_t DeviceKvCache::bytes() const {
  size_t total = 0;
  for (size_t l = 0; l < k_.size(); ++l) total += k_[l].bytes() + v_[l].bytes();
  return total;
}

int64_t DeviceKvCache::blocks_needed(SeqId seq, int64_t n) const {
  const Seq& s = seq_ref(seq);
  const int64_t bs = options_.block_size;
  const int64_t have = int64_t(s.blocks.size());
  const int64_t need = (s.length + n + bs - 1) / bs;
  int64_t extra = std::max<int64_t>(0, need - have);
  if (n > 0 && s.length % bs != 0 && refcount_[size_t(s.blocks.back())] > 1) ++extra;
  return extra;
}

int32_t DeviceKvCache::take_block() {
  SPINDLE_ASSERT(!free_.empty());
  const int32_t b = free_.back();
  free_.pop_back();
  refcount_[size_t(b)] = 1;
  return b;
}

void DeviceKvCache::drop_block(int32_t block) {
  SPINDLE_ASSERT(refcount_[size_t(block)] > 0);
  if (--refcount_[size_t(block)] == 0) free_.push_back(block);
}

void DeviceKvCache::copy_block(int32_t from, int32_t to, int64_t n_tokens, cudaStream_t stream) {
  const size_t row_bytes = size_t(config_.kv_dim()) * precision_bytes(precision_);
  const size_t block_bytes = size_t(options_.block_size) * row_bytes;
  for (size_t l = 0; l < k_.size(); ++l) {
    for (DeviceTensor* t : {&k_[l], &v_[l]}) {
      auto* base = static_cast<unsigned char*>(t->raw());
      cuda::check(cudaMemcpyAsync(base + size_t(to) * block_bytes,
                                  base + size_t(from) * block_bytes, size_t(n_tokens) * row_bytes,
                                  cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync (KV copy-on-write)");
    }
  }
}

void DeviceKvCache::append(SeqId seq, int64_t n, std::vector<int64_t>& slots,
                           cudaStream_t stream) {
  SPINDLE_CHECK(n >= 0, invalid_argument, "KV cache append of {} tokens", n);
  const int64_t needed = blocks_needed(seq, n);
  SPINDLE_CHECK(needed <= free_blocks(), resource,
                "KV cache full: sequence {} needs {} more blocks of {} tokens, {} free of {}", seq,
                needed, options_.block_size, free_blocks(), options_.n_blocks);
  Seq& s = seq_ref(seq);
  const int64_t bs = options_.block_size;
  if (n > 0 && s.length % bs != 0 && refcount_[size_t(s.blocks.back())] > 1) {
    const int32_t fresh = take_block();
    copy_block(s.blocks.back(), fresh, s.length % bs, stream);
    drop_block(s.blocks.back());
    s.blocks.back() = fresh;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = s.length + i;
    if (pos / bs >= int64_t(s.blocks.size())) s.blocks.push_back(take_block());
    slots.push_back(int64_t(s.blocks[size_t(pos / bs)]) * bs + pos % bs);
  }
  s.length += n;
}

template <class T>
cuda::DevicePagedKv<T> DeviceKvCache::layer(int64_t l) {
  cuda::DevicePagedKv<T> kv;
  kv.k = k_.at(size_t(l)).data<T>();
  kv.v = v_.at(size_t(l)).data<T>();
  kv.n_blocks = options_.n_blocks;
  kv.block_size = options_.block_size;
  kv.n_kv_heads = config_.n_kv_heads;
  kv.head_dim = config_.head_dim;
  return kv;
}

template cuda::DevicePagedKv<float> DeviceKvCache::layer<float>(int64_t);
template cuda::DevicePagedKv<cuda::bf16> DeviceKvCache::layer<cuda::bf16>(int64_t);

}  // namespace spindle::gpu
