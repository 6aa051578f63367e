#pragma once
// The training sessions' internals shared by training_ops.cpp (sessions this process's engine
// runs, and the ops' dispatch) and training_remote.cpp (a coordinator's sessions on workers,
// and a worker's side of them). Not a public interface: engine_ops.h is.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "catalog_ops.h"
#include "engine_ops.h"
#include "spindle/engine/trainer.h"

namespace spindle::service::training {

using protocol::Request;

std::string actor(const Call& call);
uint32_t lease_ms(const Daemon& d);
void check_session_room(Daemon& d, const std::string& tenant);
protocol::TrainingSessionReply session_reply(const Daemon& d, const Call& call, const Session& s,
                                             int64_t step, std::string revision_id,
                                             std::string user_metadata);

// What a new session starts from.
struct SessionStart {
  ServedBase* base = nullptr;
  std::string policy;
  engine::LoraWeights weights;
  engine::AdamW adam;
  int64_t step = 0;  // the revision's (a fresh optimizer still reports it)
  std::string revision_id;
  std::string user_metadata;
  std::shared_ptr<AllReduce> group{};  // a worker's data-parallel rank (forwarded_group)
};

// Opens a scheduler session on the start's weights and replies with the new session (under
// `id`, a coordinator's, when not "").
void open_session(Daemon& d, const Call& call, SessionStart start, std::string id = "",
                  uint32_t lease = 0);

// A save request's metrics (its metrics_json object, plus "name") as JSON text.
std::string save_metrics(const protocol::SaveRequest& req);
// Commits a snapshot (catalog thread): durable when it returns. on_written: CommitOptions'.
catalog::Revision commit_snapshot(catalog::Catalog& cat, const Call& call, const Session& s,
                                  const engine::LoraWeights& weights,
                                  const engine::AdamW* optimizer, int64_t step, int64_t ttl_ms,
                                  const std::string& metrics,
                                  std::function<void()> on_written = {});
// After a commit (catalog thread): the revision's address resolves without the catalog, so the
// first request for a just-saved revision goes straight to the scheduler.
void remember_resolution(Daemon& d, const Call& call, const Session& s,
                         const catalog::Revision& rev);
protocol::SaveReply save_reply(const Call& call, const Session& s, const catalog::Revision& rev);

// load_state's address resolved (catalog thread); throws failed_precondition when its policy
// trains on another base than session `s`.
catalog::Resolved resolve_for_session(const Daemon& d, catalog::Catalog& cat, const Call& call,
                                      const Session& s, const catalog::Address& a);

// Runs one op of a known session: here, or on its worker (run_remote_session_op).
void run_session_op(Daemon& d, const Call& call, const Session& s, const Request& request);

// ---- training_remote.cpp: the coordinator's sessions on workers (issue 17, docs/cluster.md) --

template <class Body>
Request request_of(const Call& call, Body body) {
  Request r;
  r.encoding = call.encoding;
  r.request_id = call.request_id;
  r.op = call.op;
  r.body = std::move(body);
  return r;
}

// Whether new sessions and sampling of `base` go to workers (a coordinator with a live worker
// holding it); otherwise this process's engine serves them.
bool served_remotely(const Daemon& d, const ServedBase& base);
cluster_wire::ForwardHeader open_header(const Daemon& d, const Session& s);
// The revision's blob bytes (and its optimizer state's) into `h`, as a worker opens or loads
// them. Catalog thread (the blob store is thread-safe; reads verify the checksum).
void read_start(const Daemon& d, const catalog::Revision& rev, bool with_optimizer,
                cluster_wire::ForwardHeader& h);
cluster_wire::ForwardHeader session_header(const Session& s, cluster_wire::ForwardKind kind);
// The open header of a session reopened after a lost worker, from its restore point: the last
// save_state revision, else the revision it started from, else the same fresh init (catalog
// thread).
cluster_wire::ForwardHeader restore_header(const Daemon& d, catalog::Catalog& cat,
                                           const Session& s);
// A forward of session `s`'s request: placed as a new session (its policy's primary worker,
// or rank h.dp_rank of a data-parallel group), or pinned to the worker it is on (s.worker).
Forward placed_forward(const Call& call, const Session& s, cluster_wire::ForwardHeader h,
                       Request request, ForwardDone done = {});
Forward pinned_forward(const Call& call, const Session& s, cluster_wire::ForwardHeader h,
                       Request request, ForwardDone done = {});
// Places a new session (the policy's primary worker) and opens it there; the worker's reply is
// relayed, and on success the session joins this coordinator's table pinned to that worker.
void open_remote_session(Daemon& d, const Call& call, Request request, Session proto,
                         cluster_wire::ForwardHeader h);
void run_remote_session_op(Daemon& d, const Call& call, const Session& s, const Request& request);
// save_*: the worker (s.worker) snapshots the session; the coordinator commits and replies.
void remote_save(Daemon& d, const Call& call, const Session& s, const Request& request);
// load_state: resolves and reads the revision (catalog thread, the session's gate closed
// meanwhile), then sends the load header (its bytes in it) to the session's worker(s); the
// sender replies and records the restore point (revision id, with_optimizer) on success.
using LoadSend = std::function<void(cluster_wire::ForwardHeader h, const std::string& revision_id,
                                    bool with_optimizer)>;
void remote_load(Daemon& d, const Call& call, const Session& s, const Request& request,
                 const LoadSend& send);

// ---- training_dp.cpp: data-parallel sessions (a coordinator's, on n > 1 workers) ----------

// Opens `proto` (its id set) on n workers as generation 0 of its group, from the open header
// `h`; replies with rank 0's session reply (data_parallel = n) once every rank opened, else
// closes the ranks that did and relays the first failure.
void open_dp_session(Daemon& d, const Call& call, Request request, Session proto,
                     cluster_wire::ForwardHeader h, uint32_t n);
void run_dp_session_op(Daemon& d, const Call& call, const Session& s, const Request& request);
// Closes the session's live ranks (no client waits: an expired lease) and forgets its group.
void close_dp_ranks(Daemon& d, const Session& s);
// A worker: the data-parallel group an open_session forward names (null when dp_size <= 1),
// met through the coordinator's rendezvous store.
std::shared_ptr<AllReduce> forwarded_group(Daemon& d, const cluster_wire::ForwardHeader& h,
                                           const ServedBase& base);

}  // namespace spindle::service::training
