#pragma once
/// \file messages_cluster.h
/// The cluster view (issue 17): op "cluster_status" (Empty -> ClusterStatusReply). A
/// coordinator lists its workers; a standalone daemon or a worker answers with its role and
/// no workers. Part of the wire messages: include messages.h.

#include "spindle/protocol/messages.h"

namespace spindle::protocol {

/// One worker as the coordinator sees it: what it registered and its last heartbeat's load.
struct ClusterWorkerMsg {
  bool operator==(const ClusterWorkerMsg&) const = default;
  uint32_t id = 0;
  std::string name;    // --worker-name: its identity for placement
  std::string base;    // the base it serves
  std::string device;  // "cpu", "cuda:0 (NVIDIA H200)"
  std::string host;
  int64_t pid = 0;
  bool alive = false;  // false: lost (missed heartbeats, or drained); kept to show it came back
  uint64_t last_seen_ms = 0;       // since its last heartbeat
  uint64_t base_bytes = 0;
  uint64_t device_free_bytes = 0;  // 0 = not known
  uint32_t serving_slots = 0;
  uint32_t slots_used = 0;
  uint32_t queue_depth = 0;        // requests the coordinator has in flight on it
  uint32_t loader_queue = 0;
  uint32_t sessions = 0;           // training sessions open on it
  double tokens_per_s = 0.0;
  uint64_t forwarded = 0;          // requests the coordinator sent it
  uint64_t placed_policies = 0;    // policies with a replica on it
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(id), CEREAL_NVP(name), CEREAL_NVP(base), CEREAL_NVP(device), CEREAL_NVP(host),
       CEREAL_NVP(pid), CEREAL_NVP(alive), CEREAL_NVP(last_seen_ms), CEREAL_NVP(base_bytes),
       CEREAL_NVP(device_free_bytes), CEREAL_NVP(serving_slots), CEREAL_NVP(slots_used),
       CEREAL_NVP(queue_depth), CEREAL_NVP(loader_queue), CEREAL_NVP(sessions),
       CEREAL_NVP(tokens_per_s), CEREAL_NVP(forwarded), CEREAL_NVP(placed_policies));
  }
};

/// One of the caller's data-parallel training sessions (create_training's data_parallel): the
/// workers its ranks train on, rank 0 first.
struct DataParallelSessionMsg {
  bool operator==(const DataParallelSessionMsg&) const = default;
  std::string session_id;
  std::string policy_address;     // spindle://tenant/policy
  std::vector<uint32_t> workers;  // ClusterWorkerMsg ids, by rank
  uint32_t generation = 0;        // times the group was reopened after a lost worker
  template <class A>
  void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(policy_address), CEREAL_NVP(workers),
       CEREAL_NVP(generation));
  }
};

struct ClusterStatusReply {
  bool operator==(const ClusterStatusReply&) const = default;
  std::string role;              // "standalone" | "coordinator" | "worker"
  std::string cluster_endpoint;  // a coordinator's: what workers join with --coordinator
  std::vector<ClusterWorkerMsg> workers;  // by id
  uint64_t placed_policies = 0;       // policies with at least one replica
  uint64_t replica_placements = 0;    // replicas over all policies
  /// Version 2: the caller's (its tenant's) data-parallel sessions, by session id.
  std::vector<DataParallelSessionMsg> data_parallel;
  template <class A>
  void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(role), CEREAL_NVP(cluster_endpoint), CEREAL_NVP(workers),
       CEREAL_NVP(placed_policies), CEREAL_NVP(replica_placements));
    if (version >= 2) ar(CEREAL_NVP(data_parallel));
  }
};

}  // namespace spindle::protocol

CEREAL_CLASS_VERSION(spindle::protocol::ClusterWorkerMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::DataParallelSessionMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ClusterStatusReply, 2);
