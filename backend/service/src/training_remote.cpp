// A coordinator's training sessions on workers (issue 17, docs/cluster.md): placing and opening
// them, their ops forwarded to the pinned worker, saves committed here, restore after a lost
// worker; and a worker's side of the forwarded session ops.

#include "spindle/adapters/revision_format.h"
#include "spindle/core/error.h"
#include "training_internal.h"

namespace spindle::service {

using namespace protocol;

namespace training {

// Whether new sessions and sampling of `base` go to workers (a coordinator with a live worker
// holding it); otherwise this process's engine serves them.
bool served_remotely(const Daemon& d, const ServedBase& base) {
  return d.cluster->coordinator() && d.cluster->serves(base.id);
}

static std::string placement_key(const std::string& tenant, const std::string& policy) {
  return tenant + "/" + policy;
}

cluster_wire::ForwardHeader open_header(const Daemon& d, const Session& s) {
  cluster_wire::ForwardHeader h;
  h.kind = cluster_wire::ForwardKind::open_session;
  h.tenant = s.tenant;
  h.base = s.base->id;
  h.session_id = s.id;
  h.policy = s.policy;
  h.rank = s.rank;
  h.alpha = s.alpha;
  for (engine::LoraTarget t : s.targets) h.targets.push_back(uint8_t(t));
  h.seed = s.seed;
  h.user_metadata = s.user_metadata;
  h.lease_ms = lease_ms(d);
  return h;
}

// The revision's blob bytes (and its optimizer state's) into `h`, as a worker opens or loads
// them. Catalog thread (the blob store is thread-safe; reads verify the checksum).
void read_start(const Daemon& d, const catalog::Revision& rev, bool with_optimizer,
                cluster_wire::ForwardHeader& h) {
  h.weights = d.blobs->get(rev.blob);
  if (with_optimizer && rev.state_blob) h.optimizer = d.blobs->get(*rev.state_blob);
  h.step = rev.step;
  h.revision_id = rev.id;
}

Forward placed_forward(const Call& call, const Session& s, cluster_wire::ForwardHeader h,
                       Request request, ForwardDone done) {
  Forward f;
  f.call = call;
  f.base = s.base->id;
  f.policy_key = placement_key(s.tenant, s.policy);
  f.session = true;
  f.header = std::move(h);
  f.request = encode_forwarded(std::move(request));
  f.done = std::move(done);
  return f;
}

Forward pinned_forward(const Call& call, const Session& s, cluster_wire::ForwardHeader h,
                       Request request, ForwardDone done) {
  Forward f = placed_forward(call, s, std::move(h), std::move(request), std::move(done));
  f.session = false;
  f.worker = s.worker;
  return f;
}

// Places a new session (the policy's primary worker) and opens it there; the worker's reply is
// relayed, and on success the session joins this coordinator's table pinned to that worker.
void open_remote_session(Daemon& d, const Call& call, Request request, Session proto,
                         cluster_wire::ForwardHeader h) {
  d.sessions.reserve(call.tenant);  // check_session_room counts it until add() or unreserve()
  auto done = [&d, proto](ForwardOutcome& o) mutable {
    if (!o.ok) {
      d.sessions.unreserve(proto.tenant);
      return true;
    }
    proto.worker = o.worker;
    d.sessions.add(proto);
    d.log->info("tenant {}: session {} on spindle://{}/{} (base '{}', rank {}) on worker {}",
                proto.tenant, proto.id, proto.tenant, proto.policy, proto.base->id, proto.rank,
                o.worker);
    return true;
  };
  d.cluster->post(placed_forward(call, proto, std::move(h), std::move(request), std::move(done)),
                  *d.replies);
}

cluster_wire::ForwardHeader restore_header(const Daemon& d, catalog::Catalog& cat,
                                           const Session& s) {
  cluster_wire::ForwardHeader h = open_header(d, s);
  if (s.restore_revision.empty()) {
    h.fresh = true;
  } else {
    const catalog::Resolved r = cat.get(s.tenant, {s.tenant, s.policy, s.restore_revision});
    read_start(d, r.revision, s.restore_optimizer, h);
  }
  return h;
}

cluster_wire::ForwardHeader session_header(const Session& s, cluster_wire::ForwardKind kind) {
  cluster_wire::ForwardHeader h;
  h.kind = kind;
  h.tenant = s.tenant;
  h.base = s.base->id;
  h.session_id = s.id;
  return h;
}

// Tells `worker` to rename the serving slot its save_weights snapshot took (`published_as`)
// to the committed `blob` ("" = free it). Nobody waits for the answer: a lost worker lost the
// slot too, and the forward is ordered before anything posted after it.
static void post_publish(Daemon& d, const Call& call, const Session& s, uint32_t worker,
                         const std::string& published_as, const std::string& blob) {
  cluster_wire::ForwardHeader h = session_header(s, cluster_wire::ForwardKind::publish);
  h.published_as = published_as;
  h.blob = blob;
  Request req;
  req.op = Op::save_weights;
  req.request_id = call.request_id;
  req.body = SaveRequest{s.id, "", ""};
  Call quiet = call;
  quiet.envelope.clear();  // no envelope: nothing is relayed to the client
  Forward f = pinned_forward(quiet, s, std::move(h), std::move(req),
                             [](ForwardOutcome&) { return false; });
  f.worker = worker;  // the one that answered the snapshot
  d.cluster->post(std::move(f), *d.replies);
}

// save_*: the worker snapshots the session and sends the weights back; this process commits
// them (catalog thread) and replies after the commit, as a standalone daemon does.
void remote_save(Daemon& d, const Call& call, const Session& s, const Request& request) {
  const auto& req = std::get<SaveRequest>(request.body);
  const std::string metrics = save_metrics(req);
  const bool with_state = call.op == Op::save_state;
  const int64_t ttl_ms = req.ttl_seconds * 1000;
  auto done = [&d, call, s, with_state, ttl_ms, metrics](ForwardOutcome& o) {
    if (!o.ok) return true;  // the worker's error, or its loss: relayed
    if (o.parts.size() != 1 + cluster_wire::kSnapshotFrames) {
      d.replies->error(call, errc::internal,
                       fmt::format("a worker's snapshot reply has {} frames, expected {}",
                                   o.parts.size(), 1 + cluster_wire::kSnapshotFrames));
      return false;
    }
    d.catalog.post([&d, call, s, with_state, ttl_ms, metrics, worker = o.worker,
                    parts = std::move(o.parts)](catalog::Catalog& cat) {
      const std::string& published_as = parts[4];
      try {
        const std::string source = fmt::format("the snapshot of session {}", s.id);
        const adapters::DecodedRevision rev = adapters::decode_revision(parts[1], source);
        std::optional<engine::AdamW> adam;
        if (with_state && !parts[2].empty()) {
          adam = engine::AdamW::deserialize(parts[2], source + " (optimizer state)");
        }
        const int64_t step = std::stoll(parts[3]);
        const catalog::Revision committed = commit_snapshot(
            cat, call, s, rev.weights, adam ? &*adam : nullptr, step, ttl_ms, metrics);
        if (with_state) d.sessions.set_restore(s.id, committed.id, true);
        // Posted before the reply: the client's next request is forwarded after it.
        if (!published_as.empty()) post_publish(d, call, s, worker, published_as, committed.blob);
        remember_resolution(d, call, s, committed);
        try {
          d.replies->ok(call, save_reply(call, s, committed));
        } catch (const std::exception& e) {
          reply_exception(d, call, e);  // committed: the slot keeps the blob's name
        }
      } catch (const std::exception& e) {
        if (!published_as.empty()) post_publish(d, call, s, worker, published_as, "");
        reply_exception(d, call, e);
      }
    });
    return false;
  };
  d.cluster->post(pinned_forward(call, s, session_header(s, cluster_wire::ForwardKind::snapshot),
                                 request, std::move(done)),
                  *d.replies);
}

// load_state: resolve and read here (catalog thread), then `send` the load (the header with the
// revision's bytes) to the session's worker(s). The session's later requests wait behind the
// read (the gate) and are posted after this forward, so they reach the worker after it.
void remote_load(Daemon& d, const Call& call, const Session& s, const Request& request,
                 const LoadSend& send) {
  const auto& req = std::get<LoadStateRequest>(request.body);
  d.sessions.block(s.id);
  d.catalog.post([&d, call, s, send, with_optimizer = req.with_optimizer,
                  address = req.address](catalog::Catalog& cat) {
    try {
      const catalog::Address a = client_address(d, cat, call, address);
      const catalog::Resolved r = resolve_for_session(d, cat, call, s, a);
      cluster_wire::ForwardHeader h = session_header(s, cluster_wire::ForwardKind::load_session);
      read_start(d, r.revision, with_optimizer, h);
      h.user_metadata = r.policy.user_metadata_json;
      send(std::move(h), r.revision.id, with_optimizer);
    } catch (const std::exception& e) {
      reply_exception(d, call, e);
    }
    d.sessions.unblock(s.id);
  });
}

// The session's worker was lost: open it on the worker placement picks now, from its restore
// point (the last save_state, else what it started from, else the same fresh init), then run
// the request that found it lost. Its requests that arrive meanwhile wait behind it (the gate).
// What is lost: gradients accumulated since the last optim_step, and steps since the restore
// point; optim_step then reports steps from the restore point's step on (docs/cluster.md).
void restore_session(Daemon& d, const Call& call, const Session& s, const Request& request) {
  d.sessions.block(s.id);
  d.catalog.post(
      [&d, call, s, request = std::make_shared<Request>(request)](catalog::Catalog& cat) {
        try {
          Call open = call;  // the worker reads an open as a create_training (never relayed)
          open.op = Op::create_training;
          const uint32_t lost = s.worker;
          auto done = [&d, call, s, request, lost](ForwardOutcome& o) {
            if (o.ok) {
              Session now = s;
              now.worker = o.worker;
              d.sessions.set_worker(s.id, o.worker);
              d.log->warn(
                  "tenant {}: session {} on spindle://{}/{} was on lost worker {}: restored "
                  "on worker {} from {}",
                  s.tenant, s.id, s.tenant, s.policy, lost, o.worker,
                  s.restore_revision.empty() ? std::string("a fresh init")
                                             : "revision " + s.restore_revision);
              try {
                run_session_op(d, call, now, *request);
              } catch (const std::exception& e) {
                reply_exception(d, call, e);
              }
            } else {
              d.replies->error(call, errc::unavailable,
                               fmt::format("training session {} was on worker {}, which was lost, "
                                           "and could not be restored: {}",
                                           s.id, lost, o.message));
            }
            d.sessions.unblock(s.id);
            return false;
          };
          d.cluster->post(
              placed_forward(call, s, restore_header(d, cat, s),
                             request_of(open, CreateTrainingRequest{}), std::move(done)),
              *d.replies);
        } catch (const std::exception& e) {
          reply_exception(d, call, e);
          d.sessions.unblock(s.id);
        }
      });
}

void run_remote_session_op(Daemon& d, const Call& call, const Session& s, const Request& request) {
  if (s.ranks.size() > 1) return run_dp_session_op(d, call, s, request);
  if (!d.cluster->alive(s.worker)) {
    if (call.op == Op::close_training) {  // nothing to close there: it died with the worker
      d.sessions.erase(s.id);
      return d.replies->ok(call, Empty{});
    }
    return restore_session(d, call, s, request);
  }
  switch (call.op) {
    case Op::save_weights:
    case Op::save_state:
      return remote_save(d, call, s, request);
    case Op::load_state:
      return remote_load(d, call, s, request,
                         [&d, call, s, request](cluster_wire::ForwardHeader h,
                                                const std::string& rev, bool with_optimizer) {
                           auto done = [&d, id = s.id, rev, with_optimizer](ForwardOutcome& o) {
                             if (o.ok) d.sessions.set_restore(id, rev, with_optimizer);
                             return true;
                           };
                           d.cluster->post(
                               pinned_forward(call, s, std::move(h), request, std::move(done)),
                               *d.replies);
                         });
    case Op::close_training:
      d.sessions.erase(s.id);
      break;
    default:
      break;
  }
  d.cluster->post(
      pinned_forward(call, s, session_header(s, cluster_wire::ForwardKind::request), request),
      *d.replies);
}

}  // namespace training

namespace {

using namespace training;

void open_forwarded_session(Daemon& d, const Call& call, const cluster_wire::ForwardHeader& h) {
  ServedBase& base = d.base(h.base);
  check_session_room(d, call.tenant);
  SessionStart start{.base = &base,
                     .policy = h.policy,
                     .weights = {},
                     .adam = {},
                     .step = h.step,
                     .revision_id = h.revision_id,
                     .user_metadata = h.user_metadata};
  if (h.fresh) {
    std::vector<engine::LoraTarget> targets;
    for (uint8_t t : h.targets) {
      SPINDLE_CHECK(t < engine::kLoraTargetCount, invalid_argument, "LoRA target {} unknown", t);
      targets.push_back(engine::LoraTarget(t));
    }
    start.weights = engine::init_lora(base.weights.config, h.rank, h.alpha, targets, h.seed);
  } else {
    const std::string source = fmt::format("revision {}", h.revision_id);
    adapters::DecodedRevision rev = adapters::decode_revision(h.weights, source);
    rev.weights.validate(base.weights.config, source);
    start.weights = std::move(rev.weights);
    if (!h.optimizer.empty()) {
      start.adam = engine::AdamW::deserialize(h.optimizer, source + " optimizer state");
    }
  }
  start.group = forwarded_group(d, h, base);
  open_session(d, call, std::move(start), h.session_id, h.lease_ms);
}

void load_forwarded_state(Daemon& d, const Call& call, const cluster_wire::ForwardHeader& h) {
  const std::optional<Session> s = d.sessions.find(call.tenant, h.session_id);
  SPINDLE_CHECK(s.has_value(), not_found, "training session '{}' not found on this worker",
                h.session_id);
  const std::string source = fmt::format("revision {}", h.revision_id);
  adapters::DecodedRevision rev = adapters::decode_revision(h.weights, source);
  rev.weights.validate(s->base->weights.config, source);
  engine::AdamW adam;
  if (!h.optimizer.empty())
    adam = engine::AdamW::deserialize(h.optimizer, source + " optimizer state");
  const bool queued = s->base->scheduler->submit_load(
      s->sid, std::move(rev.weights), std::move(adam),
      [&d, call, s = *s, step = h.step, id = h.revision_id,
       meta = h.user_metadata](scheduler::Outcome<int64_t> out) {
        if (!out.ok()) return d.replies->error(call, wire_code(out.error.code), out.error.message);
        d.replies->ok(call, session_reply(d, call, s, step, id, meta));
      });
  if (!queued) reply_scheduler_full(d, call, *s->base);
}

// A save_weights snapshot also goes into a serving slot here (--save-publish slot, as on a
// standalone daemon) under a provisional key the reply names; the coordinator renames it to
// the blob once committed (publish_forwarded), so the first sample of the new revision, which
// placement sends to this worker (the policy's primary, where its session is), is a device hit.
void snapshot_forwarded(Daemon& d, const Call& call, const cluster_wire::ForwardHeader& h) {
  const std::optional<Session> s = d.sessions.find(call.tenant, h.session_id);
  SPINDLE_CHECK(s.has_value(), not_found, "training session '{}' not found on this worker",
                h.session_id);
  const bool with_state = call.op == Op::save_state;
  const bool to_slot = !with_state && d.config.save_publish == "slot";
  scheduler::Scheduler* sched = s->base->scheduler;
  const bool queued = sched->submit_snapshot(
      s->sid, with_state,
      [&d, call, sched, base = s->base->id, with_state, to_slot](scheduler::Outcome<scheduler::SessionSnapshot> r) {
        if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
        const scheduler::SessionSnapshot& snap = *r.value;
        std::string published_as;
        try {
          Frames frames(cluster_wire::kSnapshotFrames);
          frames[0] = adapters::encode_revision(
              *snap.weights, adapters::revision_meta_for(*snap.weights, {base, "", DType::f32}));
          if (with_state && snap.optimizer) frames[1] = snap.optimizer->serialize();
          frames[2] = std::to_string(snap.step);
          // Encoded: the slot fill runs while the reply travels and the coordinator commits.
          if (to_slot) published_as = sched->submit_publish(snap.weights);
          frames[3] = published_as;
          d.replies->ok(call, SaveReply{}, std::move(frames));  // the body save_* replies hold
        } catch (const std::exception& e) {
          if (!published_as.empty()) sched->submit_rekey(published_as, "");
          reply_exception(d, call, e);
        }
      });
  if (!queued) reply_scheduler_full(d, call, *s->base);
}

// The coordinator committed (or failed to commit) a save whose snapshot this worker published:
// the slot takes the blob's name, or is freed. Queued on the base's scheduler, so any request
// forwarded after it finds the slot renamed. No session needed: it may have closed since.
void publish_forwarded(Daemon& d, const Call& call, const cluster_wire::ForwardHeader& h) {
  SPINDLE_CHECK(!h.published_as.empty(), invalid_argument,
                "a publish forward names no provisional serving key");
  ServedBase& base = d.base(h.base);
  if (!base.scheduler->submit_rekey(h.published_as, h.blob)) {
    return d.replies->error(call, errc::unavailable, "worker is shutting down");
  }
  d.replies->ok(call, SaveReply{});
}

}  // namespace

void dispatch_forwarded_session(Daemon& d, const Call& call,
                                const cluster_wire::ForwardHeader& header) {
  switch (header.kind) {
    case cluster_wire::ForwardKind::open_session:
      return open_forwarded_session(d, call, header);
    case cluster_wire::ForwardKind::load_session:
      return load_forwarded_state(d, call, header);
    case cluster_wire::ForwardKind::snapshot:
      return snapshot_forwarded(d, call, header);
    case cluster_wire::ForwardKind::publish:
      return publish_forwarded(d, call, header);
    case cluster_wire::ForwardKind::request:
    case cluster_wire::ForwardKind::session_sample:
      break;  // dispatch_forwarded's
  }
  SPINDLE_THROW(internal, "forward kind {} is not a session forward", int(header.kind));
}

}  // namespace spindle::service
