#include "spindle/cluster/placement.h"

#include <algorithm>
#include <iterator>

#include "spindle/core/error.h"

namespace spindle::cluster {
namespace {

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer: a bijection with full avalanche
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Rendezvous score of a (policy, worker) pair.
uint64_t score(uint64_t policy, uint64_t worker) { return mix64(policy ^ worker); }

}  // namespace

uint64_t policy_key(std::string_view policy) { return mix64(fnv1a(policy)); }

Placement::Placement(PlacementOptions options) : options_(options) {
  SPINDLE_CHECK(options_.cold_candidates >= 1, invalid_argument,
                "placement: cold_candidates must be >= 1, got {}", options_.cold_candidates);
  SPINDLE_CHECK(options_.max_replicas >= 1, invalid_argument,
                "placement: max_replicas must be >= 1, got {}", options_.max_replicas);
}

WorkerId Placement::add_worker(std::string_view name, std::string_view base) {
  SPINDLE_CHECK(!name.empty(), invalid_argument, "placement: a worker needs a name");
  SPINDLE_CHECK(!base.empty(), invalid_argument, "placement: worker '{}' names no base", name);
  WorkerId id;
  if (const auto it = by_name_.find(name); it != by_name_.end()) {
    id = it->second;
    WorkerInfo& w = workers_[id];
    SPINDLE_CHECK(w.base == base, invalid_argument,
                  "placement: worker '{}' joined with base '{}' but holds '{}'", name, base,
                  w.base);
    if (w.alive) return id;
  } else {
    id = WorkerId(workers_.size());
    workers_.push_back(WorkerInfo{std::string(name), std::string(base), false, {}});
    // The name's hash is mixed once more so that worker and policy keys of equal text differ.
    worker_hash_.push_back(mix64(fnv1a(name) ^ 0x6a09e667f3bcc909ULL));
    held_.emplace_back();
    by_name_.emplace(std::string(name), id);
  }
  workers_[id].alive = true;
  workers_[id].load = {};
  auto& live = by_base_[std::string(base)];
  live.insert(std::lower_bound(live.begin(), live.end(), id), id);
  return id;
}

uint64_t Placement::remove_worker(WorkerId id) {
  SPINDLE_CHECK(id < workers_.size(), not_found, "placement: no worker {}", id);
  WorkerInfo& w = workers_[id];
  if (!w.alive) return 0;
  w.alive = false;
  auto& live = by_base_[w.base];
  live.erase(std::remove(live.begin(), live.end(), id), live.end());
  uint64_t affected = 0;
  for (const uint64_t key : held_[id]) {
    const auto it = replicas_.find(key);
    if (it == replicas_.end()) continue;
    auto& r = it->second;
    const auto pos = std::find(r.begin(), r.end(), id);
    if (pos == r.end()) continue;
    r.erase(pos);
    ++affected;
    if (r.empty()) replicas_.erase(it);
  }
  held_[id].clear();
  held_[id].shrink_to_fit();
  return affected;
}

void Placement::update_load(WorkerId id, const WorkerLoad& load) {
  SPINDLE_CHECK(id < workers_.size(), not_found, "placement: no worker {}", id);
  workers_[id].load = load;
}

const WorkerInfo& Placement::worker(WorkerId id) const {
  SPINDLE_CHECK(id < workers_.size(), not_found, "placement: no worker {}", id);
  return workers_[id];
}

uint64_t Placement::placed_on(WorkerId id) const {
  SPINDLE_CHECK(id < workers_.size(), not_found, "placement: no worker {}", id);
  return held_[id].size();
}

uint64_t Placement::replica_placements() const {
  uint64_t n = 0;
  for (const auto& keys : held_) n += keys.size();
  return n;
}

size_t Placement::live_workers() const {
  return size_t(std::count_if(workers_.begin(), workers_.end(),
                              [](const WorkerInfo& w) { return w.alive; }));
}

const std::vector<WorkerId>* Placement::live_of(std::string_view base) const {
  const auto it = by_base_.find(base);
  return it == by_base_.end() || it->second.empty() ? nullptr : &it->second;
}

void Placement::top(uint64_t key, const std::vector<WorkerId>& live, uint32_t n,
                    const std::vector<WorkerId>& exclude, std::vector<WorkerId>& out) const {
  // A bounded insertion into `out` (n is small: cold_candidates, or 1 for a spill), so one pass
  // over the base's workers: O(W n).
  out.clear();
  std::vector<uint64_t> scores;
  scores.reserve(n);
  for (const WorkerId w : live) {
    if (std::find(exclude.begin(), exclude.end(), w) != exclude.end()) continue;
    const uint64_t s = score(key, worker_hash_[w]);
    if (out.size() == n && s <= scores.back()) continue;
    size_t i = out.size() == n ? n - 1 : out.size();
    if (out.size() < n) {
      out.push_back(w);
      scores.push_back(s);
    }
    while (i > 0 && scores[i - 1] < s) {
      out[i] = out[i - 1];
      scores[i] = scores[i - 1];
      --i;
    }
    out[i] = w;
    scores[i] = s;
  }
}

void Placement::add_replica(uint64_t key, WorkerId w) {
  replicas_[key].push_back(w);
  held_[w].push_back(key);
}

WorkerId Placement::place_cold(uint64_t key, const std::vector<WorkerId>& live) {
  top(key, live, options_.cold_candidates, {}, scratch_);
  WorkerId best = scratch_.front();
  for (const WorkerId w : scratch_) {
    if (workers_[w].load.loader_queue < workers_[best].load.loader_queue) best = w;
  }
  add_replica(key, best);
  return best;
}

std::optional<WorkerId> Placement::route_sample(std::string_view policy, std::string_view base) {
  const std::vector<WorkerId>* live = live_of(base);
  if (!live) return std::nullopt;
  const uint64_t key = policy_key(policy);
  const auto it = replicas_.find(key);
  if (it == replicas_.end()) return place_cold(key, *live);
  const std::vector<WorkerId>& r = it->second;
  WorkerId best = r.front();
  for (const WorkerId w : r) {
    if (workers_[w].load.queue_depth < workers_[best].load.queue_depth) best = w;
  }
  if (workers_[best].load.queue_depth <= options_.spill_queue ||
      r.size() >= options_.max_replicas) {
    return best;
  }
  top(key, *live, 1, r, scratch_);
  if (scratch_.empty()) return best;  // every worker of the base is already a replica
  const WorkerId spill = scratch_.front();
  add_replica(key, spill);
  return spill;
}

std::optional<WorkerId> Placement::route_session(std::string_view policy, std::string_view base) {
  const std::vector<WorkerId>* live = live_of(base);
  if (!live) return std::nullopt;
  const uint64_t key = policy_key(policy);
  const auto it = replicas_.find(key);
  return it == replicas_.end() ? place_cold(key, *live) : it->second.front();
}

std::vector<WorkerId> Placement::spread(std::span<const std::string> policies,
                                        std::string_view base) {
  const std::vector<WorkerId>* live = live_of(base);
  if (!live) return {};
  std::unordered_map<WorkerId, uint32_t> taken;  // this run's policies per worker
  std::vector<WorkerId> out;
  out.reserve(policies.size());
  for (const std::string& p : policies) {
    const uint64_t key = policy_key(p);
    uint32_t fewest = UINT32_MAX;
    for (const WorkerId w : *live) fewest = std::min(fewest, taken[w]);
    WorkerId best = live->front();
    uint64_t best_score = 0;
    bool found = false;
    for (const WorkerId w : *live) {
      if (taken[w] != fewest) continue;
      const uint64_t s = score(key, worker_hash_[w]);
      if (!found || s > best_score) {
        best = w;
        best_score = s;
        found = true;
      }
    }
    ++taken[best];
    // The run's worker becomes the policy's primary (a replica elsewhere stays a replica).
    std::vector<WorkerId>& r = replicas_[key];
    auto pos = std::find(r.begin(), r.end(), best);
    if (pos == r.end()) {
      add_replica(key, best);  // appends to r (references into replicas_ stay valid)
      pos = std::prev(r.end());
    }
    std::rotate(r.begin(), pos, pos + 1);
    out.push_back(best);
  }
  return out;
}

std::vector<WorkerId> Placement::replicas(std::string_view policy) const {
  const auto it = replicas_.find(policy_key(policy));
  return it == replicas_.end() ? std::vector<WorkerId>{} : it->second;
}

std::vector<WorkerId> Placement::preference(std::string_view policy, std::string_view base) const {
  const std::vector<WorkerId>* live = live_of(base);
  if (!live) return {};
  const uint64_t key = policy_key(policy);
  std::vector<WorkerId> out = *live;
  std::sort(out.begin(), out.end(), [&](WorkerId a, WorkerId b) {
    return score(key, worker_hash_[a]) > score(key, worker_hash_[b]);
  });
  return out;
}

}  // namespace spindle::cluster
