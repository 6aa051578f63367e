// rl::PolicyEngine on a worker (run_engines.h).

#include "run_engines.h"

#include <atomic>
#include <cmath>

#include "engine_ops.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/core/error.h"

namespace spindle::service {
namespace {

using namespace protocol;
namespace cw = cluster_wire;
template <class T>
using Done = rl::PolicyEngine::Done<T>;

// What the callbacks share with the engine.
struct RemoteState {
  std::atomic<uint32_t> worker{kLocalWorker};
  std::atomic<bool> lost{false};
  std::atomic<uint64_t> next_request{1};
};

template <class T>
scheduler::Outcome<T> failed(ErrorCode code, std::string message) {
  return {std::nullopt, {code, std::move(message)}};
}

class WorkerPolicyEngine final : public rl::PolicyEngine {
 public:
  WorkerPolicyEngine(Daemon& d, std::string tenant, const ServedBase& base, std::string policy)
      : d_(d), tenant_(std::move(tenant)), base_(base), policy_(std::move(policy)),
        session_id_(SessionTable::new_id()), st_(std::make_shared<RemoteState>()) {}

  bool open(engine::LoraWeights weights, engine::AdamW adam, int64_t step,
            Done<bool> done) override {
    cw::ForwardHeader h = header(cw::ForwardKind::open_session);
    h.policy = policy_;
    h.rank = weights.rank;
    h.alpha = weights.alpha;
    h.step = step;
    h.weights = adapters::encode_revision(
        weights, adapters::revision_meta_for(weights, {base_.id, "", DType::f32}));
    if (adam.step_count() > 0) h.optimizer = adam.serialize();
    CreateTrainingRequest body;
    body.base_model = base_.id;
    body.policy = policy_;
    body.rank = int32_t(weights.rank);
    Forward f = forward(Op::create_training, std::move(body), std::move(h), /*pinned=*/false);
    f.session = true;
    f.done = [st = st_, done = std::move(done)](ForwardOutcome& o) {
      if (!o.final) return false;
      if (!o.ok) {
        done(fail<bool>(*st, o));
        return false;
      }
      st->worker = o.worker;
      done({true, {}});
      return false;
    };
    post(std::move(f));
    return true;
  }

  bool close(Done<bool> done) override {
    return pinned(Op::close_training, SessionRequest{session_id_}, header(cw::ForwardKind::request),
                  std::move(done), [](const ForwardOutcome&) { return true; });
  }

  bool sample(std::vector<int32_t> prompt, int32_t num_samples, engine::SamplingParams params,
              Done<Completions> done) override {
    SampleRequest body;
    body.address = base_.id;  // not read: the session's weights sample
    Frames frames;
    body.prompt = add_tensor(frames, std::span<const int32_t>(prompt));
    body.num_samples = num_samples;
    body.sampling_params = {params.max_tokens, params.temperature, params.top_k, params.top_p,
                            params.seed,       params.stop_token_ids, params.stop_strings};
    return pinned(Op::sample, std::move(body), header(cw::ForwardKind::session_sample),
                  std::move(done), [this](const ForwardOutcome& o) {
                    return completions_of(decode_reply(o.parts, d_.config.limits));
                  }, std::move(frames));
  }

  bool base_logprobs(std::vector<int32_t> tokens, Done<std::vector<float>> done) override {
    ComputeLogprobsRequest body;
    body.address = base_.id;
    Frames frames;
    body.prompt = add_tensor(frames, std::span<const int32_t>(tokens));
    return pinned(Op::compute_logprobs, std::move(body), header(cw::ForwardKind::request),
                  std::move(done), [this](const ForwardOutcome& o) {
                    const Reply r = decode_reply(o.parts, d_.config.limits);
                    std::vector<float> lp = read_float32(
                        std::get<ComputeLogprobsReply>(r.body).logprobs, r.frames, "logprobs");
                    if (!lp.empty() && std::isnan(lp[0])) lp[0] = 0.0f;  // the engine's rule
                    return lp;
                  }, std::move(frames));
  }

  bool forward_backward(std::vector<engine::TrainDatum> data, engine::LossFn loss,
                        engine::LossConfig config,
                        Done<scheduler::TrainBatchResult> done) override {
    ForwardBackwardRequest body;
    body.session_id = session_id_;
    body.loss_fn = engine::loss_fn_name(loss);
    body.loss_fn_config = {{"clip_low_threshold", config.clip_low_threshold},
                           {"clip_high_threshold", config.clip_high_threshold},
                           {"beta", config.beta}};
    Frames frames;
    for (const engine::TrainDatum& t : data) {
      DatumMsg m;
      m.model_input = add_tensor(frames, std::span<const int32_t>(t.input_tokens));
      m.loss_fn_inputs.push_back({"target_tokens", add_tensor(frames, std::span<const int32_t>(t.target_tokens))});
      auto add = [&](const char* name, const std::vector<float>& v) {
        if (!v.empty()) m.loss_fn_inputs.push_back({name, add_tensor(frames, std::span<const float>(v))});
      };
      add("weights", t.weights);
      add("logprobs", t.logprobs);
      add("advantages", t.advantages);
      body.data.push_back(std::move(m));
    }
    return pinned(Op::forward_backward, std::move(body), header(cw::ForwardKind::request),
                  std::move(done), [this](const ForwardOutcome& o) {
                    const Reply r = decode_reply(o.parts, d_.config.limits);
                    const auto& b = std::get<ForwardBackwardReply>(r.body);
                    scheduler::TrainBatchResult out;
                    for (const auto& outputs : b.loss_fn_outputs) {
                      for (const NamedTensor& t : outputs) {
                        if (t.name == "logprobs") out.logprobs.push_back(read_float32(t.tensor, r.frames, "logprobs"));
                      }
                    }
                    double clip = 0.0;
                    for (const NamedValue& v : b.metrics) {
                      if (v.name == "loss:sum") out.metrics.loss = v.value;
                      if (v.name == "n_tokens:sum") out.metrics.n_tokens = int64_t(v.value);
                      if (v.name == "clip_fraction:mean") clip = v.value;
                    }
                    out.metrics.n_clipped = std::llround(clip * double(out.metrics.n_tokens));
                    return out;
                  }, std::move(frames));
  }

  bool optim_step(engine::AdamParams p, Done<engine::OptimStepResult> done) override {
    OptimStepRequest body;
    body.session_id = session_id_;
    body.adam_params = {p.learning_rate, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_clip_norm};
    return pinned(Op::optim_step, std::move(body), header(cw::ForwardKind::request),
                  std::move(done), [this](const ForwardOutcome& o) {
                    const Reply r = decode_reply(o.parts, d_.config.limits);
                    const auto& b = std::get<OptimStepReply>(r.body);
                    return engine::OptimStepResult{b.grad_norm, b.clipped, b.step};
                  });
  }

  bool snapshot(Done<scheduler::SessionSnapshot> done) override {
    SaveRequest body;
    body.session_id = session_id_;
    return pinned(Op::save_state, std::move(body), header(cw::ForwardKind::snapshot),
                  std::move(done), [this](const ForwardOutcome& o) {
                    SPINDLE_CHECK(o.parts.size() == 1 + cw::kSnapshotFrames, internal,
                                  "a worker's snapshot reply has {} frames, expected {}",
                                  o.parts.size(), 1 + cw::kSnapshotFrames);
                    const std::string source = fmt::format("session {} snapshot", session_id_);
                    adapters::DecodedRevision rev = adapters::decode_revision(o.parts[1], source);
                    rev.weights.validate(base_.weights.config, source);
                    scheduler::SessionSnapshot s;
                    s.weights = std::make_shared<const engine::LoraWeights>(std::move(rev.weights));
                    if (!o.parts[2].empty()) {
                      s.optimizer = std::make_shared<const engine::AdamW>(
                          engine::AdamW::deserialize(o.parts[2], source + " optimizer state"));
                    }
                    s.step = std::stoll(o.parts[3]);
                    return s;
                  });
  }

  bool lost() const override { return st_->lost.load(); }
  std::string where() const override {
    const uint32_t w = st_->worker.load();
    return w == kLocalWorker ? std::string("no worker yet") : fmt::format("worker {}", w);
  }

 private:
  template <class T>
  static scheduler::Outcome<T> fail(RemoteState& st, const ForwardOutcome& o) {
    if (o.lost) st.lost = true;
    return failed<T>(error_code_of(o.code), o.message);
  }

  cw::ForwardHeader header(cw::ForwardKind kind) const {
    cw::ForwardHeader h;
    h.kind = kind;
    h.tenant = tenant_;
    h.base = base_.id;
    h.session_id = session_id_;
    return h;
  }

  template <class Body>
  Forward forward(Op op, Body body, cw::ForwardHeader h, bool pinned, Frames frames = {}) {
    Request req;
    req.op = op;
    req.request_id = st_->next_request++;
    req.body = std::move(body);
    req.frames = std::move(frames);
    Forward f;
    f.call.tenant = tenant_;  // no envelope: the outcome comes back to the callback
    f.call.op = op;
    f.call.request_id = req.request_id;
    f.base = base_.id;
    f.policy_key = tenant_ + "/" + policy_;
    if (pinned) f.worker = st_->worker.load();
    f.header = std::move(h);
    f.request = encode_forwarded(std::move(req));
    return f;
  }

  // A call on the session's worker: `decode` turns its ok reply into the value (throwing on a
  // malformed one, which fails the call internal).
  template <class Body, class T, class Decode>
  bool pinned(Op op, Body body, cw::ForwardHeader h, Done<T> done, Decode decode,
              Frames frames = {}) {
    if (st_->worker.load() == kLocalWorker) {  // open failed or never ran
      done(failed<T>(ErrorCode::failed_precondition,
                     fmt::format("session {} of {} is not open on a worker", session_id_, policy_)));
      return true;
    }
    Forward f = forward(op, std::move(body), std::move(h), /*pinned=*/true, std::move(frames));
    f.done = [st = st_, done = std::move(done), decode = std::move(decode)](ForwardOutcome& o) {
      if (!o.final) return false;
      if (!o.ok) {
        done(fail<T>(*st, o));
        return false;
      }
      try {
        done({decode(o), {}});
      } catch (const std::exception& e) {
        done(failed<T>(ErrorCode::internal, std::string("a worker's reply: ") + e.what()));
      }
      return false;
    };
    post(std::move(f));
    return true;
  }

  void post(Forward f) { d_.cluster->post(std::move(f), *d_.replies); }

  Daemon& d_;
  std::string tenant_;
  const ServedBase& base_;
  std::string policy_;
  std::string session_id_;
  std::shared_ptr<RemoteState> st_;
};

}  // namespace

rl::PolicyEngineFactory worker_policy_engines(Daemon& d, std::string tenant, const ServedBase& base) {
  return [&d, tenant = std::move(tenant), &base](const std::string& policy) {
    return std::make_unique<WorkerPolicyEngine>(d, tenant, base, policy);
  };
}

}  // namespace spindle::service
