// Training sessions: create (fresh or from a saved state), forward/forward_backward,
// optim_step, save_weights/save_state (commit, then reply), load_state, close; the ops'
// dispatch. A coordinator's sessions on workers are training_remote.cpp's.

#include <nlohmann/json.hpp>

#include <random>

#include "spindle/adapters/revision_format.h"
#include "spindle/core/error.h"
#include "training_internal.h"

namespace spindle::service {

using namespace protocol;

namespace training {

static int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string actor(const Call& call) {
  return "tenant:" + call.tenant;
}

uint32_t lease_ms(const Daemon& d) {
  return uint32_t(d.config.session_lease_s * 1000.0);
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

void open_session(Daemon& d, const Call& call, SessionStart start, std::string id, uint32_t lease) {
  Session proto{.id = std::move(id), .tenant = call.tenant, .policy = start.policy,
                .base = start.base, .sid = 0, .rank = start.weights.rank,
                .alpha = start.weights.alpha};
  proto.lease_ms = lease;
  d.sessions.reserve(call.tenant);  // check_session_room counts it until add() or unreserve()
  auto group = std::move(start.group);
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
      },
      std::move(group));
}

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

catalog::Revision commit_snapshot(catalog::Catalog& cat, const Call& call, const Session& s,
                                  const engine::LoraWeights& weights,
                                  const engine::AdamW* optimizer, int64_t step, int64_t ttl_ms,
                                  const std::string& metrics, std::function<void()> on_written) {
  catalog::CommitOptions opts;
  opts.on_written = std::move(on_written);
  // Weights fit only the base they were trained on (and remember_resolution routes to it).
  opts.expected_base_id = s.base->id;
  opts.actor = actor(call);
  opts.step = step;
  opts.metrics_json = metrics;
  opts.optimizer_state = optimizer;
  if (ttl_ms > 0) opts.expires_ms = unix_ms() + ttl_ms;
  return cat.commit_revision(call.tenant, s.policy, weights, opts);
}

void remember_resolution(Daemon& d, const Call& call, const Session& s,
                         const catalog::Revision& rev) {
  d.resolutions.put(ResolutionCache::key(call.tenant, s.policy, rev.id),
                    ResolvedAdapter{s.base, rev.id, rev.blob});
}

SaveReply save_reply(const Call& call, const Session& s, const catalog::Revision& rev) {
  SaveReply out;
  out.revision_id = rev.id;
  out.address = fmt::format("spindle://{}/{}@{}", call.tenant, s.policy, rev.id);
  out.bytes = rev.bytes;
  out.expires_ms = rev.expires_ms;
  return out;
}

catalog::Resolved resolve_for_session(const Daemon& d, catalog::Catalog& cat, const Call& call,
                                      const Session& s, const catalog::Address& a) {
  catalog::Resolved r = cat.get(call.tenant, a);
  const ServedBase& base = served_base_of(d, r.policy);
  if (&base != s.base) {
    SPINDLE_THROW(failed_precondition, "{} is on base '{}'; session {} trains on '{}'",
                  r.policy.address(), base.id, s.id, s.base->id);
  }
  return r;
}

}  // namespace training

namespace {

using namespace training;

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

// "" or a JSON object (what the policy stores); throws invalid_argument otherwise.
std::string checked_user_metadata(const std::string& text) {
  if (text.empty()) return text;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  SPINDLE_CHECK(!j.is_discarded() && j.is_object(), invalid_argument,
                "user_metadata_json must be a JSON object");
  return text;
}

// data_parallel > 1 trains on that many workers of a coordinator (training_dp.cpp).
void check_data_parallel(const Daemon& d, const ServedBase& base, uint32_t n) {
  if (n <= 1) return;
  SPINDLE_CHECK(d.cluster->coordinator(), failed_precondition,
                "data_parallel {} trains a session on {} workers of a coordinator; this daemon "
                "is {} (start spindled --role coordinator and its workers, docs/cluster.md)",
                n, n, role_name(d.cluster->role()));
  SPINDLE_CHECK(served_remotely(d, base), failed_precondition,
                "data_parallel {}: no live worker serves base '{}' (it needs {})", n, base.id, n);
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
  check_data_parallel(d, base, req.data_parallel);
  cat.create_policy(call.tenant, spec, actor(call));
  if (served_remotely(d, base)) {
    Session proto{.id = SessionTable::new_id(), .tenant = call.tenant, .policy = name,
                  .base = &base, .sid = 0, .rank = req.rank, .alpha = alpha};
    proto.targets = targets;
    proto.seed = req.seed;
    proto.user_metadata = spec.user_metadata_json;
    cluster_wire::ForwardHeader h = open_header(d, proto);
    h.fresh = true;
    if (req.data_parallel > 1) {
      return open_dp_session(d, call, request_of(call, req), std::move(proto), std::move(h),
                             req.data_parallel);
    }
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
  check_data_parallel(d, base, req.data_parallel);
  if (served_remotely(d, base)) {
    Session proto{.id = SessionTable::new_id(), .tenant = call.tenant, .policy = policy,
                  .base = &base, .sid = 0, .rank = w.rank, .alpha = w.alpha};
    proto.restore_revision = r.revision.id;
    proto.restore_optimizer = req.with_optimizer;
    proto.user_metadata = metadata;
    cluster_wire::ForwardHeader h = open_header(d, proto);
    read_start(d, r.revision, req.with_optimizer, h);
    h.user_metadata = metadata;
    if (req.data_parallel > 1) {
      return open_dp_session(d, call, request_of(call, req), std::move(proto), std::move(h),
                             req.data_parallel);
    }
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

// Snapshot (engine thread, in session order) -> commit (catalog thread, durable; save_weights
// publishes the snapshot into a serving slot once its bytes are written) -> the slot renamed to
// the blob id, the host cache -> reply (--save-publish picks slot, host or none).
void save(Daemon& d, const Call& call, const Session& s, const SaveRequest& req) {
  const std::string metrics = save_metrics(req);
  const bool with_state = call.op == Op::save_state;
  const int64_t ttl_ms = req.ttl_seconds * 1000;
  const std::string& where = d.config.save_publish;  // slot | host | none (checked at start)
  const bool to_host = where != "none", to_slot = where == "slot" && !with_state;
  const bool queued = s.base->scheduler->submit_snapshot(
      s.sid, with_state,
      [&d, call, s, with_state, ttl_ms, metrics, to_host, to_slot](scheduler::Outcome<scheduler::SessionSnapshot> r) {
        if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
        d.catalog.post([&d, call, s, with_state, ttl_ms, metrics, to_host, to_slot, snap = std::move(*r.value)](catalog::Catalog& cat) {
          // The handoff at its limit (decisions.md, "Train -> serve handoff"): once the
          // revision's bytes are written (the hash and the fsync still running), the scheduler
          // places the snapshot in a serving slot under a provisional key; once committed the
          // slot is renamed to the blob id (and the weights enter the host cache), so the first
          // request for the new revision is a device hit. Started at the write's end, not at
          // the snapshot, the slot fill does not take CPU from the write and the hash.
          std::string published_as;
          auto publish = [&]() noexcept {
            try {
              published_as = s.base->scheduler->submit_publish(snap.weights);
            } catch (const std::exception& e) {
              d.log->warn("revision of session {} not published into a serving slot: {}", s.id,
                          e.what());
            }
          };
          catalog::Revision rev;
          try {
            rev = commit_snapshot(cat, call, s, *snap.weights,
                                  with_state ? snap.optimizer.get() : nullptr, snap.step, ttl_ms,
                                  metrics, to_slot ? std::function<void()>(publish) : nullptr);
          } catch (const std::exception& e) {
            // Not committed: the published slot holds no revision anyone can ask for.
            if (!published_as.empty()) s.base->scheduler->submit_rekey(published_as, "");
            return reply_exception(d, call, e);
          }
          // Committed. Queued before the reply, so the client's next request finds the slot
          // under the blob id (the scheduler takes jobs in submission order), and without a
          // catalog lookup.
          if (!published_as.empty()) s.base->scheduler->submit_rekey(published_as, rev.blob);
          remember_resolution(d, call, s, rev);
          if (to_host) {
            try {
              s.base->host_cache->insert(rev.blob, snap.weights);
            } catch (const std::exception& e) {
              d.log->warn("revision {} not cached in host memory: {}", rev.id, e.what());
            }
          }
          try {
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
      const catalog::Resolved r = resolve_for_session(d, cat, call, s, a);
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

}  // namespace

namespace training {

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

}  // namespace training

using namespace training;

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

void close_expired_sessions(Daemon& d) {
  if (d.cluster->worker()) return;  // a coordinator's sessions: it holds their leases
  const auto lease = std::chrono::duration_cast<SessionTable::Clock::duration>(
      std::chrono::duration<double>(d.config.session_lease_s));
  for (const Session& s : d.sessions.take_expired(SessionTable::Clock::now(), lease)) {
    d.log->warn("tenant {}: session {} on spindle://{}/{} expired after {:.0f} s without a "
                "request or heartbeat: closed (its saved revisions stay)",
                s.tenant, s.id, s.tenant, s.policy, d.config.session_lease_s);
    if (s.ranks.size() > 1) {  // a data-parallel session: every rank
      close_dp_ranks(d, s);
      continue;
    }
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
