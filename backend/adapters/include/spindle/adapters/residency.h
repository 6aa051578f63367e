#pragma once
// Residency manager (DESIGN.md core idea 4): maps revision ids to device slots of an
// engine::SlotPool, filling them from the host cache, and asking the loader for cold
// revisions. The batch loop never waits on I/O:
//
//   acquire(id) -> slot      resident, or in the host cache (or its load just landed) and a
//                            slot is free or evictable: the caller may run the work now;
//               -> nullopt   cold (a load is started) or every slot is held by in-flight
//                            batches: the caller parks the work and retries after take_landed()
//                            reports the id (or after a release()).
//   release(slot)            after the batch that acquired it has finished with the slot.
//
// Invariant: a slot with in_use > 0 is never cleared or reloaded; eviction picks the least
// recently used slot whose in_use is 0.
//
// Threading: one owner thread (the engine's batch loop) calls every method; the manager is
// not thread-safe itself. It shares the HostCache and Loader, which are, with loader threads.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "spindle/adapters/host_cache.h"
#include "spindle/adapters/loader.h"
#include "spindle/engine/lora.h"

namespace spindle::adapters {

enum class ResidencyTier : uint8_t { device, host, loading, cold };
const char* residency_tier_name(ResidencyTier tier);

struct RevisionPlacement {
  std::string revision_id;
  ResidencyTier tier = ResidencyTier::cold;
  int32_t slot = -1;    // device tier only
  int32_t in_use = 0;   // batches holding the slot (device tier only)
};

struct ResidencyStats {
  uint64_t acquires = 0;
  uint64_t device_hits = 0;  // already in a slot
  uint64_t host_hits = 0;    // filled a slot from the host cache or a landed load
  uint64_t cold_parks = 0;   // not in host memory: a load was requested
  uint64_t busy_parks = 0;   // in host memory, but every slot was in use
  uint64_t slot_evictions = 0;
  uint64_t load_failures = 0;
  uint64_t published = 0;    // placed by publish() before any request asked
  uint64_t known_sweeps = 0;  // scans of the known ids for cold ones to forget
  double device_hit_rate() const {
    return acquires ? double(device_hits) / double(acquires) : 0.0;
  }
};

// One finished load reported by take_landed(): error is empty on success; code is the
// spindle::ErrorCode the load threw (internal for a non-spindle exception).
struct LandedLoad {
  std::string revision_id;
  std::string error;
  ErrorCode code = ErrorCode::internal;
};

class ResidencyManager {
 public:
  // pool, cache and loader must outlive the manager.
  ResidencyManager(engine::SlotPool& pool, HostCache& cache, Loader& loader);

  // Never blocks. `priority` orders the cold load, if one is started.
  std::optional<int32_t> acquire(const std::string& revision_id,
                                 int32_t priority = kDefaultLoadPriority);
  // Places `adapter` in a slot under `revision_id` now, held by no batch (in_use 0), as the
  // most recently used: a revision expected soon (a training session's fresh save) is then a
  // device hit for its first request. Takes a free slot, else evicts the LRU slot no batch
  // holds. Returns false (nothing changes) when every slot is in use; true when placed or
  // already resident. Throws what SlotPool::load throws on an adapter the pool refuses, with
  // the slot left free.
  bool publish(const std::string& revision_id, AdapterPtr adapter);
  // Renames a placement: the slot holding `from` now holds `to`, as recently used as before.
  // For weights published before their id was known (a save's snapshot, published under a
  // provisional key while its blob is hashed). When `to` is already resident or is empty (the
  // save failed), `from`'s slot is freed instead. A no-op when `from` is not in a slot
  // (evicted meanwhile); refused (invalid_argument) when a batch holds it.
  void rekey(const std::string& from, const std::string& to);
  // Throws invalid_argument for a slot that is not held.
  void release(int32_t slot);

  // Loads requested by acquire() that finished since the last call; never blocks. Parked
  // work for a successful id can now acquire; for a failed id, fail the work with `error`.
  std::vector<LandedLoad> take_landed();

  // Where each placed revision sits now (device, host or loading); cold ones are omitted, and
  // at most a few times the slot count of cold ids are remembered between snapshots.
  std::vector<RevisionPlacement> snapshot() const;
  size_t known_count() const { return known_.size(); }  // ids snapshot() walks (bound of its size)
  std::optional<int32_t> slot_of(const std::string& revision_id) const;
  ResidencyStats stats() const { return stats_; }
  size_t pending_loads() const { return pending_.size(); }

 private:
  struct Slot {
    std::string revision_id;  // empty = free
    int32_t in_use = 0;
    uint64_t last_used = 0;   // tick of the last acquire; LRU key
  };
  // A slot that is free, or the LRU one not in use (cleared); nullopt if all are in use.
  std::optional<int32_t> claim_slot();
  // Loads `adapter` into the claimed `slot` and records it under `revision_id`.
  void place(int32_t slot, const std::string& revision_id, const engine::LoraWeights& adapter,
             int32_t in_use);
  void remember(const std::string& revision_id);  // into known_, sweeping cold ids at times

  engine::SlotPool& pool_;
  HostCache& cache_;
  Loader& loader_;
  std::vector<Slot> slots_;                              // [pool.max_slots()]
  std::unordered_map<std::string, int32_t> slot_of_;     // resident revision -> slot
  std::unordered_map<std::string, LoadFuture> pending_;  // loads not yet reported landed
  // Landed (or waiting for a free slot), not yet placed: held here so a host-cache eviction
  // cannot send parked work back to disk; bounded by the parked work's distinct ids.
  std::unordered_map<std::string, AdapterPtr> landed_;
  ResidencyTier tier_of(const std::string& id) const;
  void forget_cold();  // drops cold ids from known_
  std::vector<std::string> known_;                       // ids seen and maybe placed, first-seen order
  std::unordered_set<std::string> known_set_;
  size_t min_forget_at() const { return 1024 + 4 * slots_.size(); }
  size_t forget_at_;  // known_.size() past which acquire sweeps the cold ids out
  uint64_t tick_ = 0;
  ResidencyStats stats_;
};

}  // namespace spindle::adapters
