#pragma once
// The control plane between a coordinator and its workers (issue 17): one DEALER per worker,
// connected to the coordinator's cluster ROUTER (IPC, or TCP with CURVE), both owned by their
// process's front thread. Every message starts with a kind frame:
//
//   worker -> coordinator
//     [hello][WorkerHello]                  at start and every heartbeat (it carries the whole
//                                           registration, so a restarted coordinator learns
//                                           the worker from its next heartbeat)
//     [reply][id(8) flags(1)][reply header][tensor frames...]
//                                           a reply to forward `id`; flags bit 0: final (a
//                                           stream's last), bit 1: ok
//     [blob_get][id(8)][blob id]            a revision blob the worker's loader needs
//     [store_set][id(8)][key][value]        data-parallel rendezvous (cluster/all_reduce.h):
//     [store_get][id(8)][key]               a rank leaves or looks up a key of its group
//   coordinator -> worker
//     [welcome][Welcome]                    the answer to every hello
//     [forward][id(8)][ForwardHeader][request header][tensor frames...]
//                                           a client request, re-encoded without its token,
//                                           with what the coordinator resolved for it
//     [blob][id(8)][code][bytes | message]  code "" = the blob's bytes, else an error code
//     [store][id(8)][found "1" | "0"][value]  the answer to a store_set ("1") or store_get
//
// Bodies are cereal portable-binary with a leading format version; decode throws
// Error(format) naming the message.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::service::cluster_wire {

inline constexpr std::string_view kHello = "hello";
inline constexpr std::string_view kWelcome = "welcome";
inline constexpr std::string_view kForward = "forward";
inline constexpr std::string_view kReply = "reply";
inline constexpr std::string_view kBlobGet = "blob_get";
inline constexpr std::string_view kBlob = "blob";
inline constexpr std::string_view kStoreSet = "store_set";
inline constexpr std::string_view kStoreGet = "store_get";
inline constexpr std::string_view kStore = "store";

inline constexpr uint8_t kReplyFinal = 1;
inline constexpr uint8_t kReplyOk = 2;

// A worker's registration and load (Placement's WorkerLoad plus what cluster_status shows).
struct WorkerHello {
  std::string name;     // stable identity (--worker-name): the rendezvous hash input
  std::string base;     // the base it serves (catalog id)
  std::string device;   // "cpu", "cuda:0 (NVIDIA H200)"
  std::string host;
  int64_t pid = 0;
  uint64_t base_bytes = 0;          // resident base on the device
  uint64_t device_free_bytes = 0;   // 0 = not known (the CPU)
  uint32_t serving_slots = 0;
  uint32_t slots_used = 0;
  uint32_t queue_depth = 0;         // requests in flight on the worker
  uint32_t loader_queue = 0;        // cold loads waiting or running
  uint32_t sessions = 0;            // training sessions open
  double tokens_per_s = 0.0;
  uint64_t served = 0;              // replies sent since start
  bool draining = false;            // stopping (SIGTERM): take it out of placement now
};

struct Welcome {
  uint32_t worker_id = 0;
  std::string error;  // "" = registered; else why the coordinator refuses this worker
};

enum class ForwardKind : uint8_t {
  request = 0,       // run the request as is (sampling with `blob`; a session op on session_id)
  open_session = 1,  // create_training / _from_state / a restore: open session_id from below
  load_session = 2,  // load_state: replace session_id's weights (and optimizer) from below
  snapshot = 3,      // save_weights / save_state: reply with the session's weights (below)
  session_sample = 4,  // a sample request on session_id's live weights (a coordinator's run)
  // After a save_weights commit: rename the worker's serving slot `published_as` (where its
  // snapshot put the weights) to `blob` ("" = the commit failed: free it). The worker replies
  // ok with an empty SaveReply; the coordinator posts it before its client's reply.
  publish = 5,
};

struct ForwardHeader {
  ForwardKind kind = ForwardKind::request;
  std::string tenant;
  std::string base;         // the base's catalog id
  std::string revision_id;  // sampling: what the address resolved to ("" = the bare base)
  std::string blob;         // sampling: its blob (the residency key)
  std::string session_id;   // session ops: the coordinator's id, used by the worker as is
  std::string policy;       // open_session
  int64_t rank = 0;         // open_session, fresh: init_lora(rank, alpha, targets, seed)
  float alpha = 0.0f;
  std::vector<uint8_t> targets;  // engine::LoraTarget values
  uint64_t seed = 0;
  bool fresh = false;       // open_session: fresh init (else from `weights`)
  int64_t step = 0;         // open/load: the revision's step
  std::string user_metadata;
  uint32_t lease_ms = 0;    // open_session: the coordinator's lease, which replies report
  std::string weights;      // open/load from a revision: its blob bytes (revision format)
  std::string optimizer;    // and its optimizer state's bytes ("" = a fresh optimizer)
  // open_session of a data-parallel session: this worker is rank dp_rank of dp_size in the
  // group dp_group (its name in the coordinator's rendezvous store; a new name for each time
  // the group is opened), summing gradients with timeout dp_timeout_ms. dp_size 0 or 1 = none.
  std::string dp_group;
  uint32_t dp_rank = 0;
  uint32_t dp_size = 0;
  uint32_t dp_timeout_ms = 0;
  std::string published_as;  // publish: the provisional serving key a snapshot reply named
};

// What a snapshot forward's ok reply carries as its frames:
// [weights][optimizer][step][published_as] (the last "" unless the worker's save_weights put
// the snapshot into a serving slot: --save-publish slot).
inline constexpr size_t kSnapshotFrames = 4;

std::string encode(const WorkerHello& m);
std::string encode(const Welcome& m);
std::string encode(const ForwardHeader& m);
WorkerHello decode_hello(std::string_view bytes);
Welcome decode_welcome(std::string_view bytes);
ForwardHeader decode_forward(std::string_view bytes);

// The 8-byte id frame (little-endian) and its parse (false when not 8 bytes).
std::string id_frame(uint64_t id);
bool parse_id(std::string_view frame, uint64_t& id);

}  // namespace spindle::service::cluster_wire
