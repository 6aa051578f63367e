#pragma once
// Placement and routing of policies over workers: the coordinator's decisions (issue 17), with
// no sockets and no clock, so a simulation of 1 000 workers drives the same code that
// `spindled --role coordinator` will.
//
// The rules, for a policy P on base B (only live workers that hold B are candidates):
// - Home. Rendezvous (highest-random-weight) hashing: every candidate W scores
//   mix(hash(P), hash(W.name)); P's preference order is the candidates by descending score.
//   Removing a worker moves only the policies it held; a worker that comes back under the same
//   name is preferred again by exactly the policies that preferred it before.
// - Cold. A policy with no replica goes to the one of its first `cold_candidates` preferred
//   workers with the shortest loader queue (ties: the more preferred). The choice is kept, so
//   the next request finds it warm there.
// - Hot spill. Sampling goes to the replica with the shortest queue. When even that queue is
//   longer than `spill_queue`, the next preferred worker that is not yet a replica becomes one
//   (at most `max_replicas`) and takes the request.
// - Sessions. A training session goes to the policy's first replica (placing it cold when it has
//   none); pinning it for its life is the caller's: route_session answers once per session.
// - Runs. spread() places a run's K policies: each takes, among the workers holding the fewest
//   of this run's policies so far, its most preferred one, so K policies over W workers land
//   ceil(K/W) or floor(K/W) to a worker.
//
// Policies are keyed by a 64-bit hash of their key (policy_key): two keys that collide share
// replicas, which only co-locates them (a worker always loads a revision by its address).
// Not thread-safe: the coordinator's routing thread owns it.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spindle::cluster {

using WorkerId = uint32_t;  // index in the worker table; a worker keeps it across remove/add

// Load figures a worker heartbeats.
struct WorkerLoad {
  uint32_t queue_depth = 0;   // requests queued or running
  uint32_t loader_queue = 0;  // cold loads waiting
  uint32_t slots = 0;         // serving slots
  uint32_t slots_used = 0;
  double tokens_per_s = 0.0;
};

struct PlacementOptions {
  uint32_t cold_candidates = 2;  // >= 1: preferred workers a cold policy may go to
  uint32_t spill_queue = 32;     // queue depth past which a hot policy gains a replica
  uint32_t max_replicas = 2;     // >= 1
};

struct WorkerInfo {
  std::string name;  // stable identity, the hash input ("node3/gpu1")
  std::string base;  // the base it holds
  bool alive = false;
  WorkerLoad load;
};

// The 64-bit key placement uses for a policy (FNV-1a then a 64-bit finalizer).
uint64_t policy_key(std::string_view policy);

class Placement {
 public:
  explicit Placement(PlacementOptions options = {});

  // A worker joins (or comes back: same name, same id) holding `base`. Throws invalid_argument
  // when the name is empty, or is known with another base.
  WorkerId add_worker(std::string_view name, std::string_view base);
  // A worker is gone: it leaves every replica set it was in. Returns how many policies lost a
  // replica (those left with none are placed again on their next request). No-op if not alive.
  uint64_t remove_worker(WorkerId id);
  void update_load(WorkerId id, const WorkerLoad& load);  // throws not_found for an unknown id

  // Where a sampling request (sample, logprobs, reward tests) of `policy` goes; nullopt when no
  // live worker holds `base`. May add a replica (cold placement, hot spill).
  std::optional<WorkerId> route_sample(std::string_view policy, std::string_view base);
  // Where a new training session of `policy` goes; nullopt when no live worker holds `base`.
  std::optional<WorkerId> route_session(std::string_view policy, std::string_view base);
  // Places a run's policies (see the rules); empty when no live worker holds `base`. Each
  // policy's placement becomes its worker (first replica).
  std::vector<WorkerId> spread(std::span<const std::string> policies, std::string_view base);

  // The policy's replicas, first = primary (empty when it has none).
  std::vector<WorkerId> replicas(std::string_view policy) const;
  // The policy's preference order over live workers of `base` (all of them; O(W log W)).
  std::vector<WorkerId> preference(std::string_view policy, std::string_view base) const;

  const WorkerInfo& worker(WorkerId id) const;  // throws not_found for an unknown id
  size_t worker_count() const { return workers_.size(); }
  size_t live_workers() const;
  uint64_t placed_policies() const { return replicas_.size(); }
  uint64_t placed_on(WorkerId id) const;  // policies with a replica on the worker
  uint64_t replica_placements() const;    // replicas over all policies (>= placed_policies)

 private:
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  template <class V>
  using NameMap = std::unordered_map<std::string, V, NameHash, std::equal_to<>>;

  const std::vector<WorkerId>* live_of(std::string_view base) const;
  // The best `n` candidates by rendezvous score, most preferred first, skipping `exclude`.
  void top(uint64_t key, const std::vector<WorkerId>& live, uint32_t n,
           const std::vector<WorkerId>& exclude, std::vector<WorkerId>& out) const;
  WorkerId place_cold(uint64_t key, const std::vector<WorkerId>& live);
  void add_replica(uint64_t key, WorkerId w);

  PlacementOptions options_;
  std::vector<WorkerInfo> workers_;
  std::vector<uint64_t> worker_hash_;
  NameMap<WorkerId> by_name_;
  NameMap<std::vector<WorkerId>> by_base_;  // base -> its live workers
  std::unordered_map<uint64_t, std::vector<WorkerId>> replicas_;  // policy key -> replicas
  std::vector<std::vector<uint64_t>> held_;  // per worker: keys it is a replica of
  mutable std::vector<WorkerId> scratch_;
};

}  // namespace spindle::cluster
