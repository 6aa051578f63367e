#include "spindle/engine/kv_cache.h"

#include <cstring>

namespace spindle::engine {

KvCache::KvCache(const ModelConfig& config, KvCacheOptions options)
    : config_(config), blocks_(config.max_seq_len, options) {
  const Shape shape{blocks_.n_blocks(), blocks_.block_size(), config_.kv_cache_heads(),
                    config_.kv_cache_head_dim()};
  // MLA caches one latent row per token, read as both K and V: no V tensor.
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    k_.emplace_back(shape);
    if (!config_.mla_attention()) v_.emplace_back(shape);
  }
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const Tensor& t : k_) total += t.bytes();
  for (const Tensor& t : v_) total += t.bytes();
  return total;
}

void KvCache::copy_block(const KvBlockCopy& copy) {
  const int64_t row = config_.kv_cache_heads() * config_.kv_cache_head_dim();
  const int64_t per_block = blocks_.block_size() * row;
  for (std::vector<Tensor>* kv : {&k_, &v_}) {
    for (Tensor& t : *kv) {
      std::memcpy(t.data() + copy.to * per_block, t.data() + copy.from * per_block,
                  size_t(copy.n_tokens * row) * sizeof(float));
    }
  }
}

void KvCache::append(SeqId seq, int64_t n, std::vector<int64_t>& slots) {
  if (const auto copy = blocks_.append(seq, n, slots)) copy_block(*copy);
}

kernels::PagedKv KvCache::layer(int64_t l) {
  kernels::PagedKv kv;
  kv.k = k_.at(size_t(l)).data();
  kv.v = v_.empty() ? kv.k : v_.at(size_t(l)).data();
  kv.n_blocks = blocks_.n_blocks();
  kv.block_size = blocks_.block_size();
  kv.n_kv_heads = config_.kv_cache_heads();
  kv.head_dim = config_.kv_cache_head_dim();
  return kv;
}

}  // namespace spindle::engine
