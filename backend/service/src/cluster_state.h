#pragma once
// What the threads of a coordinator or a worker share about the cluster (issue 17). The sockets
// and the placement live on the front thread (cluster_hub.h, front.h); this holds only what
// other threads read or hand to the front thread. Thread-safe: one mutex, held for short
// updates only.
//
// Coordinator:
//   - the live workers by base (written by the front thread at each registration and loss), so
//     dispatching threads know whether a base is served remotely and whether a session's worker
//     is still there;
//   - the forward queue: any thread posts a Forward (a request for a worker, with what it
//     resolved) and the front thread sends it in post order, so a session's requests reach its
//     worker in the order they were dispatched.
//   - the data-parallel rendezvous store (cluster/all_reduce.h): the hub answers the workers'
//     store_set / store_get from it; a data-parallel session's end erases its group.
// Worker:
//   - questions for the coordinator, asked through the front thread (the only one on the
//     coordinator connection) by a thread that waits for the answer: a loader thread's blob
//     fetch, a data-parallel rank's rendezvous (its engine thread, inside its first gradient
//     sum, setting and looking up its group's keys in the coordinator's store).

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cluster_wire.h"
#include "reply_channel.h"
#include "spindle/cluster/all_reduce.h"
#include "spindle/core/error.h"

namespace spindle::service {

enum class Role : uint8_t { standalone, coordinator, worker };
Role role_from_name(const std::string& name);  // throws invalid_argument naming the choices
const char* role_name(Role role);

inline constexpr uint32_t kLocalWorker = UINT32_MAX;  // a session served by this process

// What became of a forward: the worker's reply, or the worker's loss.
struct ForwardOutcome {
  bool ok = false;                 // the worker answered ok
  bool lost = false;               // the worker was lost (or none could take it): no reply
  bool final = false;              // this ends the request (the last reply, or the loss)
  std::vector<std::string> parts;  // the reply: [header][tensor frames...] (empty when lost)
  std::string code, message;       // !ok: the error
  uint32_t worker = kLocalWorker;  // who served it
};
// Called on the front thread with each reply (a stream: each message) or the loss. Returns
// true to have the front relay it to the client (the reply as is, or the error); false when
// the callback answers the client itself (or there is no client: a restore, an expiry close).
using ForwardDone = std::function<bool(ForwardOutcome&)>;

struct Forward {
  Call call;                 // the client call (its reply route); empty envelope = none
  std::string base;
  std::string policy_key;    // placement key (tenant/policy)
  bool session = false;      // place as a new training session (else as sampling)
  uint32_t worker = kLocalWorker;  // pinned to this worker (a session's); kLocalWorker = place
  cluster_wire::ForwardHeader header;
  protocol::Frames request;  // the re-encoded request: header frame, tensor frames
  ForwardDone done;          // null = relay every reply
};

class ClusterState {
 public:
  explicit ClusterState(Role role) : role_(role) {}
  Role role() const { return role_; }
  bool coordinator() const { return role_ == Role::coordinator; }
  bool worker() const { return role_ == Role::worker; }

  // Coordinator: the live workers (front thread writes, any thread reads).
  void set_live(uint32_t worker, const std::string& base, bool live);
  bool serves(const std::string& base) const;  // some live worker holds the base
  bool alive(uint32_t worker) const;

  // Coordinator: any thread posts; the front thread takes them all, in post order. `wake` is
  // sent through the reply channel so the front thread looks now (not at its next poll tick).
  void post(Forward f, ReplyChannel& wake);
  // Several at once, adjacent in the send order (a data-parallel step's forwards to all of its
  // ranks: no other forward comes between them, so every worker sees the steps of its groups
  // in one global order; scheduler.h's open_session says why that matters).
  void post_all(std::vector<Forward> fs, ReplyChannel& wake);
  std::deque<Forward> take_forwards();

  // Worker: a question for the coordinator, sent by the front thread (the only one on the
  // coordinator connection) as [kind][id][frames...], and its answer's frames after the id.
  // Blocks up to `timeout`; without an answer throws Error(on_fail) "<what>: the coordinator
  // did not answer within N ms" (or "... cannot be reached" when the link refused it).
  std::vector<std::string> ask(std::string_view kind, std::vector<std::string> frames,
                               const std::string& what, ErrorCode on_fail, ReplyChannel& wake,
                               std::chrono::milliseconds timeout);
  struct Ask {
    uint64_t id = 0;
    std::string kind;
    std::vector<std::string> frames;
    std::string what;
    ErrorCode on_fail = ErrorCode::io;
    std::shared_ptr<std::promise<std::vector<std::string>>> promise;
  };
  std::vector<Ask> take_asks();

  // Worker: the blob's bytes from the coordinator (a loader thread). Throws Error(resource)
  // without an answer, or the coordinator's error.
  std::string fetch_blob(const std::string& blob, ReplyChannel& wake,
                         std::chrono::milliseconds timeout);
  // Worker: sets `key` (set = true; returns "") or looks it up (nullopt = not there yet) in the
  // coordinator's rendezvous store (a data-parallel rank's engine thread). Throws Error(io)
  // without an answer.
  std::optional<std::string> store_call(bool set, const std::string& key, const std::string& value,
                                        ReplyChannel& wake, std::chrono::milliseconds timeout);

  // Coordinator: the rendezvous store behind the workers' store calls.
  cluster::MemoryStore& store() { return store_; }

 private:
  const Role role_;
  mutable std::mutex mutex_;
  std::map<uint32_t, std::string> live_;    // worker -> base
  std::map<std::string, uint32_t> served_;  // base -> live workers holding it
  std::deque<Forward> forwards_;
  std::vector<Ask> asks_;
  uint64_t next_ask_ = 1;
  cluster::MemoryStore store_;
};

}  // namespace spindle::service
