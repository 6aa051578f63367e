#include "spindle/engine/kv_cache.h"

#include <cstring>

namespace spindle::engine {

KvCache::KvCache(const ModelConfig& config, KvCacheOptions options)
    : config_(config), blocks_(config.max_seq_len, options) {
  const Shape shape{blocks_.n_blocks(), blocks_.block_size(), config_.n_kv_heads,
                    config_.head_dim};
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    k_.emplace_back(shape);
    v_.emplace_back(shape);
  }
}

void KvCache::copy_block(const KvBlockCopy& copy) {
  const int64_t row = config_.n_kv_heads * config_.head_dim;
  const int64_t per_block = blocks_.block_size() * row;
  for (size_t l = 0; l < k_.size(); ++l) {
    std::memcpy(k_[l].data() + copy.to * per_block, k_[l].data() + copy.from * per_block,
                size_t(copy.n_tokens * row) * sizeof(float));
    std::memcpy(v_[l].data() + copy.to * per_block, v_[l].data() + copy.from * per_block,
                size_t(copy.n_tokens * row) * sizeof(float));
  }
}

void KvCache::append(SeqId seq, int64_t n, std::vector<int64_t>& slots) {
  if (const auto copy = blocks_.append(seq, n, slots)) copy_block(*copy);
}

kernels::PagedKv KvCache::layer(int64_t l) {
  kernels::PagedKv kv;
  kv.k = k_.at(size_t(l)).data();
  kv.v = v_.at(size_t(l)).data();
  kv.n_blocks = blocks_.n_blocks();
  kv.block_size = blocks_.block_size();
  kv.n_kv_heads = config_.n_kv_heads;
  kv.head_dim = config_.head_dim;
  return kv;
}

}  // namespace spindle::engine
