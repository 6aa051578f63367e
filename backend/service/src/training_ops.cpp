// Training sessions: create (fresh or from a saved state), forward/forward_backward,
// optim_step, save_weights/save_state (commit, then reply), load_state, close.

#include <nlohmann/json.hpp>

#include <random>

#include "catalog_ops.h"
#include "engine_ops.h"
#include "spindle/core/error.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/engine/trainer.h"

namespace spindle::service {

using namespace protocol;

namespace {

std::string actor(const Call& call) { return "tenant:" + call.tenant; }

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<engine::LoraTarget> targets_of(const CreateTrainingRequest& r) {
  using T = engine::LoraTarget;
  std::vector<T> t;
  // Attention's projections of either family: init_lora skips those the base lacks (k / v on
  // latent attention, q_a .. kv_b on the others).
  if (r.train_attn) t.insert(t.end(), {T::q, T::k, T::v, T::o, T::q_a, T::q_b, T::kv_a, T::kv_b});
  if (r.train_mlp) t.insert(t.end(), {T::gate, T::up, T::down});
  if (r.train_unembed) t.push_back(T::lm_head);
  SPINDLE_CHECK(!t.empty(), invalid_argument,
                "train_attn, train_mlp and train_unembed are all false: nothing to train");
  return t;
}

void check_session_room(Daemon& d, const std::string& tenant) {
  SPINDLE_CHECK(d.sessions.size() < d.config.max_sessions, resource,
                "all {} training sessions are taken (max_sessions); close one first",
                d.config.max_sessions);
  const uint32_t quota = d.config.tenant_max_sessions;
  const size_t held = quota == 0 ? 0 : d.sessions.held_by(tenant);
  SPINDLE_CHECK(quota == 0 || held < quota, resource,
                "tenant '{}' holds {} training session(s), its quota (--tenant-max-sessions {}); "
                "close one first",
                tenant, held, quota);
}

// "" or a JSON object (what the policy stores); throws invalid_argument otherwise.
std::string checked_user_metadata(const std::string& text) {
  if (text.empty()) return text;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  SPINDLE_CHECK(!j.is_discarded() && j.is_object(), invalid_argument,
                "user_metadata_json must be a JSON object");
  return text;
}

uint32_t lease_ms(const Daemon& d) { return uint32_t(d.config.session_lease_s * 1000.0); }

TrainingSessionReply session_reply(const Daemon& d, const Call& call, const Session& s,
                                   int64_t step, std::string revision_id,
                                   std::string user_metadata) {
  TrainingSessionReply out;
  out.session_id = s.id;
  out.policy_address = "spindle://" + call.tenant + "/" + s.policy;
  out.base_model = s.base->id;
  out.rank = int32_t(s.rank);
  out.alpha = s.alpha;
  out.step = step;
  out.lease_ms = s.lease_ms != 0 ? s.lease_ms : lease_ms(d);
  out.user_metadata_json = std::move(user_metadata);
  out.revision_id = std::move(revision_id);
  return out;
}

// What a new session starts from.
struct SessionStart {
  ServedBase* base = nullptr;
  std::string policy;
  engine::LoraWeights weights;
  engine::AdamW adam;
  int64_t step = 0;  // the revision's (a fresh optimizer still reports it)
  std::string revision_id;
  std::string user_metadata;
};

// Opens a scheduler session on the start's weights and replies with the new session (under
// `id`, a coordinator's, when not "").
void open_session(Daemon& d, const Call& call, SessionStart start, std::string id = "",
                  uint32_t lease = 0) {
  Session proto{.id = std::move(id), .tenant = call.tenant, .policy = start.policy,
                .base = start.base, .sid = 0, .rank = start.weights.rank,
                .alpha = start.weights.alpha};
  proto.lease_ms = lease;
  d.sessions.reserve(call.tenant);  // check_session_room counts it until add() or unreserve()
  start.base->scheduler->open_session(
      std::move(start.weights), std::move(start.adam),
      [&d, call, proto, step = start.step, rev = start.revision_id,
       meta = start.user_metadata](scheduler::Outcome<scheduler::SessionId> r) mutable {
        if (!r.ok()) {
          d.sessions.unreserve(call.tenant);
          d.replies->error(call, wire_code(r.error.code), r.error.message);
          return;
        }
        proto.sid = *r.value;
        proto.id = d.sessions.add(proto);
        d.log->info("tenant {}: session {} on spindle://{}/{} (base '{}', rank {})", call.tenant,
                    proto.id, call.tenant, proto.policy, proto.base->id, proto.rank);
        d.replies->ok(call, session_reply(d, call, proto, step, rev, meta));
      });
}


// ---- the coordinator's sessions on workers (issue 17, docs/cluster.md) ----------------------

// Whether new sessions and sampling of `base` go to workers (a coordinator with a live worker
// holding it); otherwise this process's engine serves them.
bool served_remotely(const Daemon& d, const ServedBase& base) {
  return d.cluster->coordinator() && d.cluster->serves(base.id);
}

template <class Body>
Request request_of(const Call& call, Body body) {
  Request r;
  r.encoding = call.encoding;
  r.request_id = call.request_id;
  r.op = call.op;
  r.body = std::move(body);
  return r;
}

std::string placement_key(const std::string& tenant, const std::string& policy) {
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

Forward pinned_forward(const Call& call, const Session& s, cluster_wire::ForwardHeader h,
                       Request request, ForwardDone done = {}) {
  Forward f;
  f.call = call;
  f.base = s.base->id;
  f.policy_key = placement_key(s.tenant, s.policy);
  f.worker = s.worker;
  f.header = std::move(h);
  f.request = encode_forwarded(std::move(request));
  f.done = std::move(done);
  return f;
}

// Places a new session (the policy's primary worker) and opens it there; the worker's reply is
// relayed, and on success the session joins this coordinator's table pinned to that worker.
void open_remote_session(Daemon& d, const Call& call, Request request, Session proto,
                         cluster_wire::ForwardHeader h) {
  d.sessions.reserve(call.tenant);  // check_session_room counts it until add() or unreserve()
  Forward f;
  f.call = call;
  f.base = proto.base->id;
  f.policy_key = placement_key(proto.tenant, proto.policy);
  f.session = true;
  f.header = std::move(h);
  f.request = encode_forwarded(std::move(request));
  f.done = [&d, proto](ForwardOutcome& o) mutable {
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
  d.cluster->post(std::move(f), *d.replies);
}

void create_training(Daemon& d, catalog::Catalog& cat, const Call& call,
                     const CreateTrainingRequest& req) {
  ServedBase& base = d.base(req.base_model);
  SPINDLE_CHECK(req.rank >= 1 && uint32_t(req.rank) <= d.config.limits.max_rank, invalid_argument,
                "rank {} outside 1..{}", req.rank, d.config.limits.max_rank);
  check_session_room(d, call.tenant);
  std::string name = req.policy;
  if (name.empty()) {
    std::random_device rd;
    name = fmt::format("policy-{:08x}", rd());
  }
  const float alpha = req.alpha == 0.0f ? float(req.rank) : req.alpha;
  const auto targets = targets_of(req);
  catalog::PolicySpec spec;
  spec.name = name;
  spec.base_id = base.id;
  spec.lora.rank = req.rank;
  spec.lora.alpha = alpha;
  spec.lora.targets = targets;
  spec.description = req.description;
  spec.user_metadata_json = checked_user_metadata(req.user_metadata_json);
  cat.create_policy(call.tenant, spec, actor(call));
  if (served_remotely(d, base)) {
    Session proto{.id = SessionTable::new_id(), .tenant = call.tenant, .policy = name,
                  .base = &base, .sid = 0, .rank = req.rank, .alpha = alpha};
    proto.targets = targets;
    proto.seed = req.seed;
    proto.user_metadata = spec.user_metadata_json;
    cluster_wire::ForwardHeader h = open_header(d, proto);
    h.fresh = true;
    return open_remote_session(d, call, request_of(call, req), std::move(proto), std::move(h));
  }
  open_session(d, call,
               {.base = &base,
                .policy = name,
                .weights = engine::init_lora(base.weights.config, req.rank, alpha, targets, req.seed),
                .adam = {},
                .step = 0,
                .revision_id = "",
                .user_metadata = spec.user_metadata_json});
}

std::string fork_name(const std::string& policy) {
  std::random_device rd;
  return fmt::format("{}-{:08x}", policy.substr(0, 100), rd());
}

void create_from_state(Daemon& d, catalog::Catalog& cat, const Call& call,
                       const CreateTrainingFromStateRequest& req) {
  check_session_room(d, call.tenant);
  const catalog::Address a = client_address(d, cat, call, req.address);
  const catalog::Resolved r = cat.get(call.tenant, a);
  ServedBase& base = served_base_of(d, r.policy);
  const catalog::Address exact{a.tenant, a.policy, r.revision.id};
  engine::LoraWeights w = cat.read_revision(call.tenant, exact).weights;
  std::optional<engine::AdamW> adam;
  if (req.with_optimizer) adam = cat.read_optimizer_state(call.tenant, exact);
  std::string policy = r.policy.name;
  std::string metadata = r.policy.user_metadata_json;
  if (req.fork) {
    // A new policy line whose head is the revision: later saves never move the source's head.
    const std::string name = req.policy.empty() ? fork_name(r.policy.name) : req.policy;
    catalog::Policy forked = cat.fork(call.tenant, exact, name, actor(call));
    policy = forked.name;
    metadata = forked.user_metadata_json;
  }
  SPINDLE_CHECK(req.user_metadata_json.empty() || req.fork, invalid_argument,
                "user_metadata_json is stored on a new policy: it needs fork = true");
  if (served_remotely(d, base)) {
    Session proto{.id = SessionTable::new_id(), .tenant = call.tenant, .policy = policy,
                  .base = &base, .sid = 0, .rank = w.rank, .alpha = w.alpha};
    proto.restore_revision = r.revision.id;
    proto.restore_optimizer = req.with_optimizer;
    proto.user_metadata = metadata;
    cluster_wire::ForwardHeader h = open_header(d, proto);
    read_start(d, r.revision, req.with_optimizer, h);
    h.user_metadata = metadata;
    return open_remote_session(d, call, request_of(call, req), std::move(proto), std::move(h));
  }
  open_session(d, call,
               {.base = &base,
                .policy = policy,
                .weights = std::move(w),
                .adam = adam ? std::move(*adam) : engine::AdamW{},
                .step = r.revision.step,
                .revision_id = r.revision.id,
                .user_metadata = metadata});
}

engine::LossConfig loss_config(const std::vector<NamedValue>& values) {
  engine::LossConfig c;
  for (const auto& v : values) {
    if (v.name == "clip_low_threshold") c.clip_low_threshold = float(v.value);
    else if (v.name == "clip_high_threshold") c.clip_high_threshold = float(v.value);
    else if (v.name == "beta") c.beta = float(v.value);
    else SPINDLE_THROW(invalid_argument, "loss_fn_config: unknown key '{}' (expected "
                       "clip_low_threshold, clip_high_threshold, beta)", v.name);
  }
  c.validate();
  return c;
}

std::vector<engine::TrainDatum> train_data(const ForwardBackwardRequest& req, const Frames& frames) {
  std::vector<engine::TrainDatum> out(req.data.size());
  for (size_t i = 0; i < req.data.size(); ++i) {
    const DatumMsg& m = req.data[i];
    engine::TrainDatum& t = out[i];
    const std::string at = fmt::format("data[{}]", i);
    t.input_tokens = read_int32(m.model_input, frames, at + ".model_input");
    for (const NamedTensor& nt : m.loss_fn_inputs) {
      const std::string field = at + ".loss_fn_inputs." + nt.name;
      if (nt.name == "target_tokens") t.target_tokens = read_int32(nt.tensor, frames, field);
      else if (nt.name == "weights") t.weights = read_float32(nt.tensor, frames, field);
      else if (nt.name == "logprobs") t.logprobs = read_float32(nt.tensor, frames, field);
      else if (nt.name == "advantages") t.advantages = read_float32(nt.tensor, frames, field);
      else SPINDLE_THROW(invalid_argument, "{}: unknown loss input (expected target_tokens, "
                         "weights, logprobs, advantages)", field);
    }
    SPINDLE_CHECK(t.target_tokens.size() == t.input_tokens.size(), invalid_argument,
                  "{}.loss_fn_inputs.target_tokens: {} values, model_input has {}", at,
                  t.target_tokens.size(), t.input_tokens.size());
  }
  return out;
}

void forward_backward(Daemon& d, const Call& call, const Session& s, const Request& req) {
  const auto& fb = std::get<ForwardBackwardRequest>(req.body);
  const auto fn = engine::loss_fn_from_name(fb.loss_fn);
  SPINDLE_CHECK(fn.has_value(), invalid_argument,
                "loss_fn '{}' is not one of cross_entropy, importance_sampling, ppo, cispo, dro",
                fb.loss_fn);
  const bool backward = call.op == Op::forward_backward;
  const bool queued = s.base->scheduler->submit_forward_backward(
      s.sid, train_data(fb, req.frames), *fn, loss_config(fb.loss_fn_config), backward,
      [&d, call](scheduler::Outcome<scheduler::TrainBatchResult> r) {
        if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
        ForwardBackwardReply out;
        Frames frames;
        for (const auto& lp : r.value->logprobs) {
          out.loss_fn_outputs.push_back({NamedTensor{"logprobs", add_tensor(frames, std::span<const float>(lp))}});
        }
        const auto& m = r.value->metrics;
        out.metrics = {{"loss:sum", m.loss},
                       {"n_tokens:sum", double(m.n_tokens)},
                       {"clip_fraction:mean", m.clip_fraction()}};
        d.replies->ok(call, std::move(out), std::move(frames));
      });
  if (!queued) reply_scheduler_full(d, call, *s.base);
}

void optim_step(Daemon& d, const Call& call, const Session& s, const OptimStepRequest& req) {
  engine::AdamParams p;
  p.learning_rate = req.adam_params.learning_rate;
  p.beta1 = req.adam_params.beta1;
  p.beta2 = req.adam_params.beta2;
  p.eps = req.adam_params.eps;
  p.weight_decay = req.adam_params.weight_decay;
  p.grad_clip_norm = req.adam_params.grad_clip_norm;
  p.validate();
  const bool queued = s.base->scheduler->submit_optim_step(
      s.sid, p, [&d, call](scheduler::Outcome<engine::OptimStepResult> r) {
        if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
        d.replies->ok(call, OptimStepReply{r.value->step, r.value->grad_norm, r.value->clipped});
      });
  if (!queued) reply_scheduler_full(d, call, *s.base);
}

// A save request's metrics (its metrics_json object, plus "name") as JSON text.
std::string save_metrics(const SaveRequest& req) {
  nlohmann::json metrics = nlohmann::json::object();
  if (!req.metrics_json.empty()) {
    try {
      metrics = nlohmann::json::parse(req.metrics_json);
    } catch (const nlohmann::json::exception& e) {
      SPINDLE_THROW(invalid_argument, "metrics_json is not JSON: {}", e.what());
    }
    SPINDLE_CHECK(metrics.is_object(), invalid_argument, "metrics_json must be a JSON object");
  }
  if (!req.name.empty()) metrics["name"] = req.name;
  return metrics.dump();
}

// Commits a snapshot (catalog thread): durable when it returns.
catalog::Revision commit_snapshot(catalog::Catalog& cat, const Call& call,
                                  const Session& s, const engine::LoraWeights& weights,
                                  const engine::AdamW* optimizer, int64_t step, int64_t ttl_ms,
                                  const std::string& metrics) {
  catalog::CommitOptions opts;
  opts.actor = actor(call);
  opts.step = step;
  opts.metrics_json = metrics;
  opts.optimizer_state = optimizer;
  if (ttl_ms > 0) opts.expires_ms = unix_ms() + ttl_ms;
  return cat.commit_revision(call.tenant, s.policy, weights, opts);
}

SaveReply save_reply(const Call& call, const Session& s, const catalog::Revision& rev) {
  SaveReply out;
  out.revision_id = rev.id;
  out.address = fmt::format("spindle://{}/{}@{}", call.tenant, s.policy, rev.id);
  out.bytes = rev.bytes;
  out.expires_ms = rev.expires_ms;
  return out;
}

// Snapshot (engine thread, in session order) -> commit (catalog thread, durable) -> host cache
// (the new revision's first sample is a host hit) -> reply.
void save(Daemon& d, const Call& call, const Session& s, const SaveRequest& req) {
  const std::string metrics = save_metrics(req);
  const bool with_state = call.op == Op::save_state;
  const int64_t ttl_ms = req.ttl_seconds * 1000;
  const bool queued = s.base->scheduler->submit_snapshot(
      s.sid, with_state,
      [&d, call, s, with_state, ttl_ms, metrics](scheduler::Outcome<scheduler::SessionSnapshot> r) {
        if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
        d.catalog.post([&d, call, s, with_state, ttl_ms, metrics, snap = std::move(*r.value)](catalog::Catalog& cat) {
          try {
            const catalog::Revision rev =
                commit_snapshot(cat, call, s, *snap.weights,
                                with_state ? snap.optimizer.get() : nullptr, snap.step, ttl_ms,
                                metrics);
            try {
              s.base->host_cache->insert(rev.blob, snap.weights);
            } catch (const Error& e) {
              d.log->warn("revision {} not cached in host memory: {}", rev.id, e.what());
            }
            d.replies->ok(call, save_reply(call, s, rev));
          } catch (const std::exception& e) {
            reply_exception(d, call, e);
          }
        });
      });
  if (!queued) reply_scheduler_full(d, call, *s.base);
}

// The session's later requests wait behind the catalog read (SessionTable's gate), so the load
// reaches the scheduler in arrival order and nothing sent after it runs on the old weights.
void load_state(Daemon& d, const Call& call, const Session& s, const LoadStateRequest& req) {
  d.sessions.block(s.id);
  d.catalog.post([&d, call, s, address = req.address,
                  with_optimizer = req.with_optimizer](catalog::Catalog& cat) {
    try {
      const catalog::Address a = client_address(d, cat, call, address);
      const catalog::Resolved r = cat.get(call.tenant, a);
      ServedBase& base = served_base_of(d, r.policy);
      if (&base != s.base) {
        SPINDLE_THROW(failed_precondition, "{} is on base '{}'; session {} trains on '{}'",
                      r.policy.address(), base.id, s.id, s.base->id);
      }
      const catalog::Address exact{a.tenant, a.policy, r.revision.id};
      engine::LoraWeights w = cat.read_revision(call.tenant, exact).weights;
      std::optional<engine::AdamW> adam;
      if (with_optimizer) adam = cat.read_optimizer_state(call.tenant, exact);
      const int64_t step = r.revision.step;
      const bool queued = s.base->scheduler->submit_load(
          s.sid, std::move(w), adam ? std::move(*adam) : engine::AdamW{},
          [&d, call, s, step, rev = r.revision.id,
           meta = r.policy.user_metadata_json](scheduler::Outcome<int64_t> out) {
            if (!out.ok()) return d.replies->error(call, wire_code(out.error.code), out.error.message);
            Session now = s;
            d.replies->ok(call, session_reply(d, call, now, step, rev, meta));
          });
      if (!queued) reply_scheduler_full(d, call, *s.base);
    } catch (const std::exception& e) {
      reply_exception(d, call, e);
    }
    d.sessions.unblock(s.id);
  });
}

void close_training(Daemon& d, const Call& call, const Session& s) {
  d.sessions.erase(s.id);
  s.base->scheduler->close_session(s.sid, [&d, call](scheduler::Outcome<bool> r) {
    if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
    d.replies->ok(call, Empty{});
  });
}

const std::string& session_id_of(const Request& req) {
  return std::visit(
      [](const auto& body) -> const std::string& {
        if constexpr (requires { body.session_id; }) {
          return body.session_id;
        } else {
          static const std::string none;
          return none;
        }
      },
      req.body);
}


// ---- a coordinator's session on a worker ------------------------------------------------------

void run_session_op(Daemon& d, const Call& call, const Session& s, const Request& request);

cluster_wire::ForwardHeader session_header(const Session& s, cluster_wire::ForwardKind kind) {
  cluster_wire::ForwardHeader h;
  h.kind = kind;
  h.tenant = s.tenant;
  h.base = s.base->id;
  h.session_id = s.id;
  return h;
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
    d.catalog.post([&d, call, s, with_state, ttl_ms, metrics,
                    parts = std::move(o.parts)](catalog::Catalog& cat) {
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
        d.replies->ok(call, save_reply(call, s, committed));
      } catch (const std::exception& e) {
        reply_exception(d, call, e);
      }
    });
    return false;
  };
  d.cluster->post(pinned_forward(call, s, session_header(s, cluster_wire::ForwardKind::snapshot),
                                 request, std::move(done)),
                  *d.replies);
}

// load_state: resolve and read here (catalog thread), load there. The session's later requests
// wait behind the read (the gate) and are posted after this forward, so they reach the worker
// after it.
void remote_load(Daemon& d, const Call& call, const Session& s, const Request& request) {
  const auto& req = std::get<LoadStateRequest>(request.body);
  d.sessions.block(s.id);
  d.catalog.post([&d, call, s, request, with_optimizer = req.with_optimizer,
                  address = req.address](catalog::Catalog& cat) {
    try {
      const catalog::Address a = client_address(d, cat, call, address);
      const catalog::Resolved r = cat.get(call.tenant, a);
      ServedBase& base = served_base_of(d, r.policy);
      if (&base != s.base) {
        SPINDLE_THROW(failed_precondition, "{} is on base '{}'; session {} trains on '{}'",
                      r.policy.address(), base.id, s.id, s.base->id);
      }
      cluster_wire::ForwardHeader h = session_header(s, cluster_wire::ForwardKind::load_session);
      read_start(d, r.revision, with_optimizer, h);
      h.user_metadata = r.policy.user_metadata_json;
      auto done = [&d, id = s.id, rev = r.revision.id, with_optimizer](ForwardOutcome& o) {
        if (o.ok) d.sessions.set_restore(id, rev, with_optimizer);
        return true;
      };
      d.cluster->post(pinned_forward(call, s, std::move(h), request, std::move(done)), *d.replies);
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
  d.catalog.post([&d, call, s, request = std::make_shared<Request>(request)](catalog::Catalog& cat) {
    try {
      cluster_wire::ForwardHeader h = open_header(d, s);
      if (s.restore_revision.empty()) {
        h.fresh = true;
      } else {
        const catalog::Resolved r = cat.get(s.tenant, {s.tenant, s.policy, s.restore_revision});
        read_start(d, r.revision, s.restore_optimizer, h);
      }
      Forward f;
      f.call = call;
      f.base = s.base->id;
      f.policy_key = placement_key(s.tenant, s.policy);
      f.session = true;
      f.header = std::move(h);
      Call open = call;  // the worker reads an open as a create_training (never relayed)
      open.op = Op::create_training;
      f.request = encode_forwarded(request_of(open, CreateTrainingRequest{}));
      const uint32_t lost = s.worker;
      f.done = [&d, call, s, request, lost](ForwardOutcome& o) {
        if (o.ok) {
          Session now = s;
          now.worker = o.worker;
          d.sessions.set_worker(s.id, o.worker);
          d.log->warn("tenant {}: session {} on spindle://{}/{} was on lost worker {}: restored "
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
      d.cluster->post(std::move(f), *d.replies);
    } catch (const std::exception& e) {
      reply_exception(d, call, e);
      d.sessions.unblock(s.id);
    }
  });
}

void run_remote_session_op(Daemon& d, const Call& call, const Session& s, const Request& request) {
  if (!d.cluster->alive(s.worker)) {
    if (call.op == Op::close_training) {  // nothing to close there: it died with the worker
      d.sessions.erase(s.id);
      return d.replies->ok(call, Empty{});
    }
    return restore_session(d, call, s, request);
  }
  switch (call.op) {
    case Op::save_weights:
    case Op::save_state: return remote_save(d, call, s, request);
    case Op::load_state: return remote_load(d, call, s, request);
    case Op::close_training: d.sessions.erase(s.id); break;
    default: break;
  }
  d.cluster->post(pinned_forward(call, s, session_header(s, cluster_wire::ForwardKind::request),
                                 request),
                  *d.replies);
}

void run_session_op(Daemon& d, const Call& call, const Session& s, const Request& request) {
  if (s.worker != kLocalWorker) return run_remote_session_op(d, call, s, request);
  switch (call.op) {
    case Op::forward:
    case Op::forward_backward: return forward_backward(d, call, s, request);
    case Op::optim_step: return optim_step(d, call, s, std::get<OptimStepRequest>(request.body));
    case Op::save_weights:
    case Op::save_state: return save(d, call, s, std::get<SaveRequest>(request.body));
    case Op::load_state: return load_state(d, call, s, std::get<LoadStateRequest>(request.body));
    case Op::close_training: return close_training(d, call, s);
    default: SPINDLE_THROW(internal, "{} is not a training operation", op_name(call.op));
  }
}


// ---- a worker's side of forwarded session ops ------------------------------------------------

void open_forwarded_session(Daemon& d, const Call& call, const cluster_wire::ForwardHeader& h) {
  ServedBase& base = d.base(h.base);
  check_session_room(d, call.tenant);
  SessionStart start{.base = &base, .policy = h.policy, .weights = {}, .adam = {},
                     .step = h.step, .revision_id = h.revision_id,
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
  if (!h.optimizer.empty()) adam = engine::AdamW::deserialize(h.optimizer, source + " optimizer state");
  const bool queued = s->base->scheduler->submit_load(
      s->sid, std::move(rev.weights), std::move(adam),
      [&d, call, s = *s, step = h.step, id = h.revision_id,
       meta = h.user_metadata](scheduler::Outcome<int64_t> out) {
        if (!out.ok()) return d.replies->error(call, wire_code(out.error.code), out.error.message);
        d.replies->ok(call, session_reply(d, call, s, step, id, meta));
      });
  if (!queued) reply_scheduler_full(d, call, *s->base);
}

void snapshot_forwarded(Daemon& d, const Call& call, const cluster_wire::ForwardHeader& h) {
  const std::optional<Session> s = d.sessions.find(call.tenant, h.session_id);
  SPINDLE_CHECK(s.has_value(), not_found, "training session '{}' not found on this worker",
                h.session_id);
  const bool with_state = call.op == Op::save_state;
  const bool queued = s->base->scheduler->submit_snapshot(
      s->sid, with_state,
      [&d, call, base = s->base->id, with_state](scheduler::Outcome<scheduler::SessionSnapshot> r) {
        if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
        try {
          const scheduler::SessionSnapshot& snap = *r.value;
          Frames frames(cluster_wire::kSnapshotFrames);
          frames[0] = adapters::encode_revision(
              *snap.weights, adapters::revision_meta_for(*snap.weights, {base, "", DType::f32}));
          if (with_state && snap.optimizer) frames[1] = snap.optimizer->serialize();
          frames[2] = std::to_string(snap.step);
          d.replies->ok(call, SaveReply{}, std::move(frames));  // the body save_* replies hold
        } catch (const std::exception& e) {
          reply_exception(d, call, e);
        }
      });
  if (!queued) reply_scheduler_full(d, call, *s->base);
}

}  // namespace

void dispatch_training_op(Daemon& d, Call call, protocol::Request request) {
  try {
    switch (call.op) {
      case Op::create_training:
        d.catalog.post([&d, call, body = std::get<CreateTrainingRequest>(request.body)](catalog::Catalog& cat) {
          try {
            create_training(d, cat, call, body);
          } catch (const std::exception& e) {
            reply_exception(d, call, e);
          }
        });
        return;
      case Op::create_training_from_state:
        d.catalog.post([&d, call, body = std::get<CreateTrainingFromStateRequest>(request.body)](
                           catalog::Catalog& cat) {
          try {
            create_from_state(d, cat, call, body);
          } catch (const std::exception& e) {
            reply_exception(d, call, e);
          }
        });
        return;
      default:
        break;
    }
    const std::string sid = session_id_of(request);
    const std::optional<Session> s = d.sessions.find(call.tenant, sid);  // renews its lease
    if (!s) {
      d.log->warn("refused request {} ({}): tenant '{}' has no session '{}'", call.request_id,
                  op_name(call.op), call.tenant, sid);
      SPINDLE_THROW(not_found, "training session '{}' not found (closed, or its lease expired)",
                    sid);
    }
    // Behind a pending load_state of the session, this waits its turn (SessionTable's gate).
    const bool known = d.sessions.run_or_defer(
        sid, [&d, call, s = *s, request = std::make_shared<protocol::Request>(std::move(request))] {
          try {
            run_session_op(d, call, s, *request);
          } catch (const std::exception& e) {
            reply_exception(d, call, e);
          }
        });
    if (!known) SPINDLE_THROW(not_found, "training session '{}' not found", sid);
  } catch (const std::exception& e) {
    reply_exception(d, call, e);
  }
}

void dispatch_forwarded_session(Daemon& d, const Call& call,
                                const cluster_wire::ForwardHeader& header) {
  switch (header.kind) {
    case cluster_wire::ForwardKind::open_session: return open_forwarded_session(d, call, header);
    case cluster_wire::ForwardKind::load_session: return load_forwarded_state(d, call, header);
    case cluster_wire::ForwardKind::snapshot: return snapshot_forwarded(d, call, header);
    case cluster_wire::ForwardKind::request:
    case cluster_wire::ForwardKind::session_sample: break;  // dispatch_forwarded's
  }
  SPINDLE_THROW(internal, "forward kind {} is not a session forward", int(header.kind));
}

void close_expired_sessions(Daemon& d) {
  if (d.cluster->worker()) return;  // a coordinator's sessions: it holds their leases
  const auto lease = std::chrono::duration_cast<SessionTable::Clock::duration>(
      std::chrono::duration<double>(d.config.session_lease_s));
  for (const Session& s : d.sessions.take_expired(SessionTable::Clock::now(), lease)) {
    d.log->warn("tenant {}: session {} on spindle://{}/{} expired after {:.0f} s without a "
                "request or heartbeat: closed (its saved revisions stay)",
                s.tenant, s.id, s.tenant, s.policy, d.config.session_lease_s);
    if (s.worker != kLocalWorker) {  // close it on its worker; no client waits for the reply
      Call none;
      none.tenant = s.tenant;
      none.op = Op::close_training;
      d.cluster->post(pinned_forward(none, s, session_header(s, cluster_wire::ForwardKind::request),
                                     request_of(none, SessionRequest{s.id}),
                                     [](ForwardOutcome&) { return false; }),
                      *d.replies);
      continue;
    }
    s.base->scheduler->close_session(s.sid, [&d, id = s.id](scheduler::Outcome<bool> r) {
      if (!r.ok()) d.log->error("closing expired session {}: {}", id, r.error.message);
    });
  }
}

}  // namespace spindle::service
