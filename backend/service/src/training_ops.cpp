// Training sessions: create (fresh or from a saved state), forward/forward_backward,
// optim_step, save_weights/save_state (commit, then reply), load_state, close.

#include <nlohmann/json.hpp>

#include <random>

#include "catalog_ops.h"
#include "engine_ops.h"
#include "spindle/core/error.h"
#include "spindle/engine/trainer.h"

namespace spindle::service {

using namespace protocol;

namespace {

std::string actor(const Call& call) { return "tenant:" + call.tenant; }

std::vector<engine::LoraTarget> targets_of(const CreateTrainingRequest& r) {
  using T = engine::LoraTarget;
  std::vector<T> t;
  if (r.train_attn) t.insert(t.end(), {T::q, T::k, T::v, T::o});
  if (r.train_mlp) t.insert(t.end(), {T::gate, T::up, T::down});
  if (r.train_unembed) t.push_back(T::lm_head);
  SPINDLE_CHECK(!t.empty(), invalid_argument,
                "train_attn, train_mlp and train_unembed are all false: nothing to train");
  return t;
}

void check_session_room(Daemon& d) {
  SPINDLE_CHECK(d.sessions.size() < d.config.max_sessions, resource,
                "all {} training sessions are taken (max_sessions); close one first",
                d.config.max_sessions);
}

// Opens a scheduler session on `weights` and replies with the new session.
void open_session(Daemon& d, const Call& call, const std::string& policy, engine::LoraWeights weights,
                  engine::AdamW adam) {
  const int64_t rank = weights.rank;
  const float alpha = weights.alpha;
  const int64_t step = adam.step_count();
  d.scheduler->open_session(
      std::move(weights), std::move(adam),
      [&d, call, policy, rank, alpha, step](scheduler::Outcome<scheduler::SessionId> r) {
        if (!r.ok()) {
          d.replies->error(call, wire_code(r.error.code), r.error.message);
          return;
        }
        const std::string id = d.sessions.add(
            {.id = "", .tenant = call.tenant, .policy = policy, .sid = *r.value, .rank = rank, .alpha = alpha});
        d.log->info("tenant {}: session {} on spindle://{}/{} (rank {})", call.tenant, id,
                    call.tenant, policy, rank);
        TrainingSessionReply out;
        out.session_id = id;
        out.policy_address = "spindle://" + call.tenant + "/" + policy;
        out.base_model = d.base_id;
        out.rank = int32_t(rank);
        out.alpha = alpha;
        out.step = step;
        d.replies->ok(call, std::move(out));
      });
}

void create_training(Daemon& d, catalog::Catalog& cat, const Call& call,
                     const CreateTrainingRequest& req) {
  const std::string base = req.base_model.empty() ? d.base_id : req.base_model;
  SPINDLE_CHECK(base == d.base_id, not_found, "base model '{}' is not served here (this server: '{}')",
                base, d.base_id);
  SPINDLE_CHECK(req.rank >= 1 && uint32_t(req.rank) <= d.config.limits.max_rank, invalid_argument,
                "rank {} outside 1..{}", req.rank, d.config.limits.max_rank);
  check_session_room(d);
  std::string name = req.policy;
  if (name.empty()) {
    std::random_device rd;
    name = fmt::format("policy-{:08x}", rd());
  }
  const float alpha = req.alpha == 0.0f ? float(req.rank) : req.alpha;
  const auto targets = targets_of(req);
  catalog::PolicySpec spec;
  spec.name = name;
  spec.base_id = d.base_id;
  spec.lora.rank = req.rank;
  spec.lora.alpha = alpha;
  spec.lora.targets = targets;
  spec.description = req.description;
  cat.create_policy(call.tenant, spec, actor(call));
  open_session(d, call, name,
               engine::init_lora(d.weights.config, req.rank, alpha, targets, req.seed), {});
}

void create_from_state(Daemon& d, catalog::Catalog& cat, const Call& call,
                       const CreateTrainingFromStateRequest& req) {
  check_session_room(d);
  const catalog::Address a = client_address(d, cat, call, req.address);
  const catalog::Resolved r = cat.get(call.tenant, a);
  check_served_base(d, r.policy);
  const catalog::Address exact{a.tenant, a.policy, r.revision.id};
  engine::LoraWeights w = cat.read_revision(call.tenant, exact).weights;
  std::optional<engine::AdamW> adam = cat.read_optimizer_state(call.tenant, exact);
  open_session(d, call, r.policy.name, std::move(w), adam ? std::move(*adam) : engine::AdamW{});
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
  const bool queued = d.scheduler->submit_forward_backward(
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
  if (!queued) reply_scheduler_full(d, call);
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
  const bool queued = d.scheduler->submit_optim_step(
      s.sid, p, [&d, call](scheduler::Outcome<engine::OptimStepResult> r) {
        if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
        d.replies->ok(call, OptimStepReply{r.value->step, r.value->grad_norm, r.value->clipped});
      });
  if (!queued) reply_scheduler_full(d, call);
}

// Snapshot (engine thread, in session order) -> commit (catalog thread, durable) -> host cache
// (the new revision's first sample is a host hit) -> reply.
void save(Daemon& d, const Call& call, const Session& s, const SaveRequest& req) {
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
  const bool with_state = call.op == Op::save_state;
  const bool queued = d.scheduler->submit_snapshot(
      s.sid, with_state,
      [&d, call, s, with_state, metrics = metrics.dump()](scheduler::Outcome<scheduler::SessionSnapshot> r) {
        if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
        d.catalog.post([&d, call, s, with_state, metrics, snap = std::move(*r.value)](catalog::Catalog& cat) {
          try {
            catalog::CommitOptions opts;
            opts.actor = actor(call);
            opts.step = snap.step;
            opts.metrics_json = metrics;
            opts.optimizer_state = with_state ? snap.optimizer.get() : nullptr;
            const catalog::Revision rev = cat.commit_revision(call.tenant, s.policy, *snap.weights, opts);
            try {
              d.host_cache->insert(rev.blob, snap.weights);
            } catch (const Error& e) {
              d.log->warn("revision {} not cached in host memory: {}", rev.id, e.what());
            }
            SaveReply out;
            out.revision_id = rev.id;
            out.address = fmt::format("spindle://{}/{}@{}", call.tenant, s.policy, rev.id);
            out.bytes = rev.bytes;
            d.replies->ok(call, std::move(out));
          } catch (const std::exception& e) {
            reply_exception(d, call, e);
          }
        });
      });
  if (!queued) reply_scheduler_full(d, call);
}

void load_state(Daemon& d, const Call& call, const Session& s, const LoadStateRequest& req) {
  d.catalog.post([&d, call, s, address = req.address](catalog::Catalog& cat) {
    try {
      const catalog::Address a = client_address(d, cat, call, address);
      const catalog::Resolved r = cat.get(call.tenant, a);
      check_served_base(d, r.policy);
      const catalog::Address exact{a.tenant, a.policy, r.revision.id};
      engine::LoraWeights w = cat.read_revision(call.tenant, exact).weights;
      std::optional<engine::AdamW> adam = cat.read_optimizer_state(call.tenant, exact);
      const int64_t rank = w.rank;
      const float alpha = w.alpha;
      const bool queued = d.scheduler->submit_load(
          s.sid, std::move(w), adam ? std::move(*adam) : engine::AdamW{},
          [&d, call, s, rank, alpha](scheduler::Outcome<int64_t> r) {
            if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
            TrainingSessionReply out;
            out.session_id = s.id;
            out.policy_address = "spindle://" + call.tenant + "/" + s.policy;
            out.base_model = d.base_id;
            out.rank = int32_t(rank);
            out.alpha = alpha;
            out.step = *r.value;
            d.replies->ok(call, std::move(out));
          });
      if (!queued) reply_scheduler_full(d, call);
    } catch (const std::exception& e) {
      reply_exception(d, call, e);
    }
  });
}

void close_training(Daemon& d, const Call& call, const Session& s) {
  d.sessions.erase(s.id);
  d.scheduler->close_session(s.sid, [&d, call](scheduler::Outcome<bool> r) {
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
    const std::string& sid = session_id_of(request);
    const std::optional<Session> s = d.sessions.find(call.tenant, sid);
    if (!s) {
      d.log->warn("refused request {} ({}): tenant '{}' has no session '{}'", call.request_id,
                  op_name(call.op), call.tenant, sid);
      SPINDLE_THROW(not_found, "training session '{}' not found", sid);
    }
    switch (call.op) {
      case Op::forward:
      case Op::forward_backward: return forward_backward(d, call, *s, request);
      case Op::optim_step: return optim_step(d, call, *s, std::get<OptimStepRequest>(request.body));
      case Op::save_weights:
      case Op::save_state: return save(d, call, *s, std::get<SaveRequest>(request.body));
      case Op::load_state: return load_state(d, call, *s, std::get<LoadStateRequest>(request.body));
      case Op::close_training: return close_training(d, call, *s);
      default: SPINDLE_THROW(internal, "{} is not a training operation", op_name(call.op));
    }
  } catch (const std::exception& e) {
    reply_exception(d, call, e);
  }
}

}  // namespace spindle::service
