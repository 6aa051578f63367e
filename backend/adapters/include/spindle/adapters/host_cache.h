#pragma once
// Host tier of adapter residency (DESIGN.md core idea 4): decoded adapters in host memory,
// keyed by revision id, evicted least-recently-used first by bytes. Pinned entries are never
// evicted; an insert that cannot fit without evicting a pinned entry is refused.
//
// Threading: every method is safe to call from any thread; one mutex guards all state (held
// only for map/list updates, never during I/O). Values are shared_ptr<const LoraWeights>, so
// an entry evicted while a reader still holds it stays alive until that reader lets go.

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "spindle/engine/lora.h"

namespace spindle::adapters {

// Bytes of every tensor of an adapter (fp32 host storage).
size_t lora_weights_bytes(const engine::LoraWeights& weights);

struct HostCacheStats {
  uint64_t hits = 0;       // get() found the id
  uint64_t misses = 0;     // get() did not
  uint64_t inserts = 0;
  uint64_t evictions = 0;  // entries dropped to make room
  size_t bytes = 0;        // bytes of resident entries
  size_t capacity_bytes = 0;
  size_t entries = 0;
  size_t pinned = 0;       // entries with pin count > 0
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
};

class HostCache {
 public:
  explicit HostCache(size_t capacity_bytes);

  // The adapter, marked most recently used, or nullptr. Counts a hit or a miss.
  std::shared_ptr<const engine::LoraWeights> get(const std::string& id);
  // Presence without touching LRU order or stats.
  bool contains(const std::string& id) const;

  // Inserts (or replaces, keeping its pin count) and marks most recently used, evicting
  // unpinned entries LRU-first until it fits. Throws resource, naming the id and the bytes,
  // when the entry is larger than the capacity or only pinned entries are left to evict;
  // nothing changes then. Throws invalid_argument for a null adapter.
  void insert(const std::string& id, std::shared_ptr<const engine::LoraWeights> adapter);

  // Pin counts nest: an entry is evictable again after as many unpins as pins. pin throws
  // not_found for an absent id; unpin throws invalid_argument when the id is not pinned.
  void pin(const std::string& id);
  void unpin(const std::string& id);
  bool erase(const std::string& id);  // false if absent; pinned entries are erased too

  std::vector<std::string> ids() const;  // most recently used first
  HostCacheStats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const engine::LoraWeights> adapter;
    size_t bytes = 0;
    int32_t pins = 0;
    std::list<std::string>::iterator lru_pos;  // into lru_
  };

  mutable std::mutex mutex_;
  size_t capacity_bytes_;
  size_t bytes_ = 0;                               // guarded by mutex_
  std::list<std::string> lru_;                     // front = most recent; guarded by mutex_
  std::unordered_map<std::string, Entry> entries_; // guarded by mutex_
  HostCacheStats counters_;                        // hits/misses/inserts/evictions only
};

}  // namespace spindle::adapters
