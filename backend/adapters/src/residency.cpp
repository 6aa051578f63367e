#include "spindle/adapters/residency.h"

#include <chrono>

#include "spindle/core/error.h"

namespace spindle::adapters {

const char* residency_tier_name(ResidencyTier tier) {
  switch (tier) {
    case ResidencyTier::device: return "device";
    case ResidencyTier::host: return "host";
    case ResidencyTier::loading: return "loading";
    case ResidencyTier::cold: return "cold";
  }
  return "?";
}

ResidencyManager::ResidencyManager(engine::SlotPool& pool, HostCache& cache, Loader& loader)
    : pool_(pool), cache_(cache), loader_(loader), slots_(size_t(pool.max_slots())),
      forget_at_(min_forget_at()) {}

std::optional<int32_t> ResidencyManager::claim_slot() {
  std::optional<int32_t> victim;
  for (int32_t s = 0; s < int32_t(slots_.size()); ++s) {
    const Slot& slot = slots_[size_t(s)];
    if (slot.revision_id.empty()) return s;
    if (slot.in_use == 0 && (!victim || slot.last_used < slots_[size_t(*victim)].last_used))
      victim = s;
  }
  if (victim) {
    Slot& slot = slots_[size_t(*victim)];
    SPINDLE_ASSERT(slot.in_use == 0);
    slot_of_.erase(slot.revision_id);
    slot.revision_id.clear();
    pool_.clear(*victim);
    ++stats_.slot_evictions;
  }
  return victim;
}

void ResidencyManager::remember(const std::string& revision_id) {
  if (!known_set_.insert(revision_id).second) return;
  known_.push_back(revision_id);
  // Bounded by what is placed, not by every id ever sampled: past a few times the slots,
  // drop the ids that went cold (a catalog of 10^6 policies must not grow this without end).
  // The next sweep waits until the list has doubled, so a sweep that keeps most ids (they
  // sit in the host cache) is paid for by as many new ids: O(1) amortised per acquire, not a
  // scan of every known id on each cold one (what a storm of cold loads used to cost).
  if (known_.size() > forget_at_) {
    forget_cold();
    forget_at_ = std::max(min_forget_at(), 2 * known_.size());
  }
}

void ResidencyManager::place(int32_t slot_index, const std::string& revision_id,
                             const engine::LoraWeights& adapter, int32_t in_use) {
  pool_.load(slot_index, adapter);  // validated first; throws with the slot left free
  landed_.erase(revision_id);
  Slot& slot = slots_[size_t(slot_index)];
  slot.revision_id = revision_id;
  slot.in_use = in_use;
  slot.last_used = ++tick_;
  slot_of_[revision_id] = slot_index;
}

std::optional<int32_t> ResidencyManager::acquire(const std::string& revision_id,
                                                 int32_t priority) {
  ++stats_.acquires;
  remember(revision_id);
  if (auto it = slot_of_.find(revision_id); it != slot_of_.end()) {
    Slot& slot = slots_[size_t(it->second)];
    ++slot.in_use;
    slot.last_used = ++tick_;
    ++stats_.device_hits;
    return it->second;
  }
  // Host memory: a load that landed (held here even if the cache evicted it), or the cache.
  AdapterPtr adapter;
  if (auto it = landed_.find(revision_id); it != landed_.end()) adapter = it->second;
  if (!adapter) adapter = cache_.get(revision_id);
  if (!adapter) {
    if (!pending_.count(revision_id))
      pending_.emplace(revision_id, loader_.request(revision_id, priority));
    ++stats_.cold_parks;
    return std::nullopt;
  }
  const std::optional<int32_t> claimed = claim_slot();
  if (!claimed) {
    landed_.emplace(revision_id, adapter);  // keep it in hand until a slot frees up
    ++stats_.busy_parks;
    return std::nullopt;
  }
  place(*claimed, revision_id, *adapter, /*in_use=*/1);
  ++stats_.host_hits;
  return claimed;
}

bool ResidencyManager::publish(const std::string& revision_id, AdapterPtr adapter) {
  SPINDLE_CHECK(adapter != nullptr, invalid_argument, "residency: publish of {} without weights",
                revision_id);
  remember(revision_id);
  if (auto it = slot_of_.find(revision_id); it != slot_of_.end()) {
    slots_[size_t(it->second)].last_used = ++tick_;
    return true;
  }
  const std::optional<int32_t> claimed = claim_slot();
  if (!claimed) return false;
  place(*claimed, revision_id, *adapter, /*in_use=*/0);
  ++stats_.published;
  return true;
}

void ResidencyManager::rekey(const std::string& from, const std::string& to) {
  const auto it = slot_of_.find(from);
  if (it == slot_of_.end()) return;
  const int32_t index = it->second;
  Slot& slot = slots_[size_t(index)];
  SPINDLE_CHECK(slot.in_use == 0, invalid_argument,
                "residency: rekey of {} while {} batches hold its slot", from, slot.in_use);
  slot_of_.erase(it);
  if (to.empty() || slot_of_.count(to)) {
    slot.revision_id.clear();
    pool_.clear(index);
    return;
  }
  slot.revision_id = to;
  slot_of_[to] = index;
  landed_.erase(to);  // resident now: no host copy to hold for it
  remember(to);
}

void ResidencyManager::release(int32_t slot) {
  SPINDLE_CHECK(slot >= 0 && slot < int32_t(slots_.size()) && slots_[size_t(slot)].in_use > 0,
                invalid_argument, "residency: release of slot {} that no batch holds", slot);
  --slots_[size_t(slot)].in_use;
}

std::vector<LandedLoad> ResidencyManager::take_landed() {
  std::vector<LandedLoad> out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ++it;
      continue;
    }
    LandedLoad landed{it->first, {}};
    try {
      AdapterPtr adapter = it->second.get();
      // Already placed by an acquire that found it in the cache: nothing to hold on to.
      if (!slot_of_.count(it->first)) landed_[it->first] = std::move(adapter);
    } catch (const Error& e) {
      landed.error = e.what();
      landed.code = e.code();
      ++stats_.load_failures;
    } catch (const std::exception& e) {
      landed.error = e.what();
      ++stats_.load_failures;
    }
    out.push_back(std::move(landed));
    it = pending_.erase(it);
  }
  return out;
}

std::optional<int32_t> ResidencyManager::slot_of(const std::string& revision_id) const {
  auto it = slot_of_.find(revision_id);
  if (it == slot_of_.end()) return std::nullopt;
  return it->second;
}

ResidencyTier ResidencyManager::tier_of(const std::string& id) const {
  if (slot_of_.count(id)) return ResidencyTier::device;
  if (landed_.count(id) || cache_.contains(id)) return ResidencyTier::host;
  if (pending_.count(id) || loader_.in_flight(id)) return ResidencyTier::loading;
  return ResidencyTier::cold;
}

void ResidencyManager::forget_cold() {
  ++stats_.known_sweeps;
  std::erase_if(known_, [&](const std::string& id) {
    if (tier_of(id) != ResidencyTier::cold) return false;
    known_set_.erase(id);
    return true;
  });
}

std::vector<RevisionPlacement> ResidencyManager::snapshot() const {
  std::vector<RevisionPlacement> out;
  out.reserve(known_.size());
  for (const std::string& id : known_) {
    if (tier_of(id) == ResidencyTier::cold) continue;  // cold: absent, as if never seen
    RevisionPlacement p{id, ResidencyTier::cold, -1, 0};
    if (auto it = slot_of_.find(id); it != slot_of_.end()) {
      p.tier = ResidencyTier::device;
      p.slot = it->second;
      p.in_use = slots_[size_t(it->second)].in_use;
    } else if (landed_.count(id) || cache_.contains(id)) {
      p.tier = ResidencyTier::host;
    } else if (pending_.count(id) || loader_.in_flight(id)) {
      p.tier = ResidencyTier::loading;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace spindle::adapters
