#include "spindle/adapters/host_cache.h"

#include "spindle/core/error.h"

namespace spindle::adapters {

size_t lora_weights_bytes(const engine::LoraWeights& weights) {
  size_t total = 0;
  engine::for_each_lora_tensor(weights,
                               [&](const std::string&, const Tensor& t) { total += t.bytes(); });
  return total;
}

HostCache::HostCache(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

std::shared_ptr<const engine::LoraWeights> HostCache::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    ++counters_.misses;
    return nullptr;
  }
  ++counters_.hits;
  lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
  return it->second.adapter;
}

bool HostCache::contains(const std::string& id) const {
  std::lock_guard lock(mutex_);
  return entries_.count(id) != 0;
}

void HostCache::insert(const std::string& id, std::shared_ptr<const engine::LoraWeights> adapter) {
  SPINDLE_CHECK(adapter != nullptr, invalid_argument, "host cache: null adapter for revision '{}'",
                id);
  const size_t bytes = lora_weights_bytes(*adapter);
  std::lock_guard lock(mutex_);
  SPINDLE_CHECK(bytes <= capacity_bytes_, resource,
                "host cache: revision '{}' needs {} bytes, more than the cache's capacity {}", id,
                bytes, capacity_bytes_);
  auto existing = entries_.find(id);
  const size_t replaced = existing == entries_.end() ? 0 : existing->second.bytes;
  // Plan evictions first (LRU-first, unpinned, not the id itself) so a refusal changes nothing.
  size_t freed = 0;
  std::vector<std::string> victims;
  for (auto it = lru_.rbegin(); it != lru_.rend() && bytes_ - replaced - freed + bytes > capacity_bytes_;
       ++it) {
    const Entry& e = entries_.at(*it);
    if (e.pins > 0 || *it == id) continue;
    victims.push_back(*it);
    freed += e.bytes;
  }
  SPINDLE_CHECK(bytes_ - replaced - freed + bytes <= capacity_bytes_, resource,
                "host cache: cannot fit revision '{}' ({} bytes): {} of {} bytes are pinned", id,
                bytes, bytes_ - replaced - freed, capacity_bytes_);
  for (const std::string& v : victims) {
    auto e = entries_.find(v);
    bytes_ -= e->second.bytes;
    lru_.erase(e->second.lru_pos);
    entries_.erase(e);
    ++counters_.evictions;
  }
  ++counters_.inserts;
  if (existing != entries_.end()) {
    bytes_ -= existing->second.bytes;
    existing->second.adapter = std::move(adapter);
    existing->second.bytes = bytes;
    lru_.splice(lru_.begin(), lru_, existing->second.lru_pos);
  } else {
    lru_.push_front(id);
    entries_.emplace(id, Entry{std::move(adapter), bytes, 0, lru_.begin()});
  }
  bytes_ += bytes;
}

void HostCache::pin(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  SPINDLE_CHECK(it != entries_.end(), not_found, "host cache: cannot pin revision '{}': not cached",
                id);
  ++it->second.pins;
}

void HostCache::unpin(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  SPINDLE_CHECK(it != entries_.end() && it->second.pins > 0, invalid_argument,
                "host cache: cannot unpin revision '{}': not pinned", id);
  --it->second.pins;
}

bool HostCache::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru_pos);
  entries_.erase(it);
  return true;
}

std::vector<std::string> HostCache::ids() const {
  std::lock_guard lock(mutex_);
  return {lru_.begin(), lru_.end()};
}

HostCacheStats HostCache::stats() const {
  std::lock_guard lock(mutex_);
  HostCacheStats s = counters_;
  s.bytes = bytes_;
  s.capacity_bytes = capacity_bytes_;
  s.entries = entries_.size();
  for (const auto& [id, e] : entries_) s.pinned += e.pins > 0 ? 1 : 0;
  return s;
}

}  // namespace spindle::adapters
