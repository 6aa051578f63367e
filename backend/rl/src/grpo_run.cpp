// GrpoRun: lifecycle (start/run/stop/status), sessions, catalog policies, saves.

#include <nlohmann/json.hpp>

#include <algorithm>

#include "grpo_impl.h"
#include "spindle/core/error.h"
#include "spindle/engine/sampler.h"
#include "spindle/engine/trainer.h"

namespace spindle::rl {

namespace detail {

void check_submitted(bool ok, const std::string& what) {
  SPINDLE_CHECK(ok, resource, "{}: the scheduler refused the job (queue full or stopping)", what);
}

}  // namespace detail

const char* run_state_name(RunState s) {
  switch (s) {
    case RunState::idle: return "idle";
    case RunState::running: return "running";
    case RunState::finished: return "finished";
    case RunState::stopped: return "stopped";
    case RunState::failed: return "failed";
  }
  return "?";
}

std::string StepMetrics::to_json() const {
  nlohmann::json j;
  j["policy"] = policy;
  j["step"] = step;
  if (trained) {
    j["reward_mean"] = reward_mean;
    j["reward_std"] = reward_std;
    j["terms"] = term_means;
    j["kl"] = kl;
    j["entropy"] = entropy;
    j["loss"] = loss;
    j["clip_fraction"] = clip_fraction;
    j["response_length"] = response_length;
    j["tokens_per_s"] = tokens_per_s;
    j["step_time_s"] = step_time_s;
    j["dropped_groups"] = dropped_groups;
    j["grad_norm"] = grad_norm;
  }
  if (eval_accuracy) j["eval_accuracy"] = *eval_accuracy;
  if (eval_reward) j["eval_reward"] = *eval_reward;
  if (revision) j["revision"] = *revision;
  return j.dump();
}

GrpoRun::GrpoRun(RunConfig config, RunContext context, RunOptions options)
    : config_(std::move(config)) {
  validate_run_config(config_);
  SPINDLE_CHECK(context.scheduler && context.tokenizer, invalid_argument,
                "GrpoRun: the context needs a scheduler and a tokenizer");
  SPINDLE_CHECK(!options.resume || !context.catalog_dir.empty(), invalid_argument,
                "GrpoRun: resume needs a catalog");
  for (const PolicyConfig& p : config_.policies) {
    SPINDLE_CHECK(context.catalog_dir.empty() || !context.base_id.empty(), invalid_argument,
                  "GrpoRun: policy {} is saved in a catalog, which needs the base id", p.name);
  }
  impl_ = std::make_unique<Impl>(config_, std::move(context), options);
  impl_->status_.steps = config_.steps;
}

GrpoRun::~GrpoRun() {
  stop();
  wait();
}

void GrpoRun::on_metrics(std::function<void(const StepMetrics&)> callback) {
  impl_->callback = std::move(callback);
}

void GrpoRun::start() {
  SPINDLE_CHECK(!thread_.joinable(), invalid_argument, "GrpoRun: already started");
  thread_ = std::thread([this] {
    try {
      impl_->execute();
    } catch (...) {
      // execute() recorded the failure in status().
    }
  });
}

void GrpoRun::run() { impl_->execute(); }

void GrpoRun::stop() { impl_->stop_requested = true; }

void GrpoRun::wait() {
  if (thread_.joinable()) thread_.join();
}

RunStatus GrpoRun::status() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->status_;
}

std::vector<StepMetrics> GrpoRun::history() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->history_;
}

void GrpoRun::Impl::execute() {
  {
    std::lock_guard lock(mutex);
    status_.state = RunState::running;
  }
  try {
    prepare();
    const int64_t start = open_sessions(options.resume);
    {
      std::lock_guard lock(mutex);
      status_.step = start;
    }
    if (start == 0) {
      std::vector<StepMetrics> m(policies.size());
      for (size_t k = 0; k < policies.size(); ++k) m[k].policy = policies[k].config->name;
      if (config.eval_prompts > 0) evaluate(m);
      report(m, 0);
    }
    int64_t s = start;
    int64_t saved = start;
    std::vector<StepMetrics> m;
    while (s < config.steps && !stop_requested) {
      try {
        const int64_t next = s + 1;
        m = step(next);
        const bool last = next == config.steps || stop_requested;
        if (config.eval_prompts > 0 &&
            (last || (config.eval_every > 0 && next % config.eval_every == 0)))
          evaluate(m);
        if (cat && (last || (config.save_every > 0 && next % config.save_every == 0))) {
          save(next, m);
          saved = next;
        }
        s = next;
        report(m, s);
      } catch (const std::exception& e) {
        // A lost engine (its worker died): continue from the last save on fresh engines. The
        // data order and seeds are functions of (seed, step), so the steps re-run as they ran.
        const int64_t failovers = [&] {
          std::lock_guard lock(mutex);
          return status_.failovers;
        }();
        if (!cat || !any_lost() || failovers >= kMaxFailovers) throw;
        s = saved = fail_over(e.what(), saved);
        m.clear();
      }
    }
    // A stop that arrived between two steps: the last finished step is saved too, so a stopped
    // run always resumes from where it stopped.
    if (cat && s > saved) save(s, m);
    close_sessions();
    std::lock_guard lock(mutex);
    status_.state = s == config.steps ? RunState::finished : RunState::stopped;
  } catch (const std::exception& e) {
    try {
      close_sessions();
    } catch (...) {
    }
    std::lock_guard lock(mutex);
    status_.state = RunState::failed;
    status_.error = e.what();
    throw;
  }
}

void GrpoRun::Impl::prepare() {
  scorer = std::make_unique<rewards::RewardScorer>(ctx.reward_host);
  if (!ctx.catalog_dir.empty()) cat = std::make_unique<catalog::Catalog>(ctx.catalog_dir);
  policies.resize(config.policies.size());
  for (size_t k = 0; k < config.policies.size(); ++k) {
    detail::PolicyState& p = policies[k];
    p.config = &config.policies[k];
    p.index = k;
    p.seed = engine::sample_seed(config.seed, k + 1);
    const std::string path = fmt::format("policies[{}]", k);
    try {
      p.data = load_dataset(p.config->dataset, ctx.data_root, config.seed);
      scorer->validate(p.config->reward);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{} ({}): {}", path, p.config->name, e.what()));
    }
  }
}

int64_t GrpoRun::Impl::open_sessions(bool resume, std::optional<int64_t> at_step) {
  std::optional<int64_t> start;
  std::vector<detail::Pending<bool>> opened(policies.size());
  for (detail::PolicyState& p : policies) {
    const PolicyConfig& pc = *p.config;
    std::vector<engine::LoraTarget> targets = pc.targets;
    if (targets.empty()) {
      using T = engine::LoraTarget;
      targets = {T::q, T::k, T::v, T::o, T::gate, T::up, T::down};
    }
    engine::LoraWeights weights;
    engine::AdamW adam;
    int64_t from = 0;
    bool fresh = true;
    if (cat) {
      std::optional<catalog::Policy> existing;
      try {
        existing = cat->get_policy(config.tenant, pc.name);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::not_found) throw;
      }
      if (existing && existing->head) {
        SPINDLE_CHECK(resume, invalid_argument,
                      "policy {} already has revisions: resume it or choose another name",
                      existing->address());
        catalog::Address a{config.tenant, pc.name, ""};
        catalog::Revision r = cat->get(config.tenant, a).revision;
        // A failover continues from the run's last complete save: a policy whose save of a
        // later step went through before the failure goes back to its revision of that step.
        while (at_step && r.step > *at_step && r.parent) {
          r = cat->get(config.tenant, {config.tenant, pc.name, *r.parent}).revision;
        }
        if (!at_step || r.step <= *at_step) {
          a.revision = r.id;
          weights = cat->read_revision(config.tenant, a).weights;
          if (auto st = cat->read_optimizer_state(config.tenant, a)) adam = std::move(*st);
          from = r.step;
          fresh = false;
        }
      } else if (!existing) {
        catalog::PolicySpec spec;
        spec.name = pc.name;
        spec.base_id = ctx.base_id;
        spec.lora = {pc.rank, pc.alpha, targets, false};
        std::sort(spec.lora.targets.begin(), spec.lora.targets.end());
        spec.description = "GRPO run";
        cat->create_policy(config.tenant, spec, "grpo");
      }
    }
    if (fresh) {
      weights = engine::init_lora(ctx.model_config, pc.rank, pc.alpha, targets,
                                  engine::sample_seed(p.seed, 99));
    }
    SPINDLE_CHECK(!start || *start == from, invalid_argument,
                  "policy {} resumes at step {} but another policy of the run at step {}",
                  pc.name, from, *start);
    start = from;
    p.engine = ctx.engines ? ctx.engines(pc.name) : make_local_policy_engine(*ctx.scheduler, tenant_key(p));
    detail::check_submitted(
        p.engine->open(std::move(weights), std::move(adam), from, opened[p.index].callback()),
        "open session");
  }
  for (detail::PolicyState& p : policies) {
    opened[p.index].get("open training session for " + p.config->name + " on " + p.engine->where());
    p.open = true;
  }
  return start.value_or(0);
}

bool GrpoRun::Impl::any_lost() const {
  for (const detail::PolicyState& p : policies) {
    if (p.engine && p.engine->lost()) return true;
  }
  return false;
}

int64_t GrpoRun::Impl::fail_over(const std::string& why, int64_t saved) {
  std::string reason = why;
  for (;;) {
    {
      std::lock_guard lock(mutex);
      ++status_.failovers;
    }
    for (detail::PolicyState& p : policies) {  // the live ones would hold their slots otherwise
      if (!p.open) continue;
      p.open = false;
      if (p.engine->lost()) continue;
      detail::Pending<bool> closed;
      if (p.engine->close(closed.callback())) {
        try {
          closed.get("close session");
        } catch (const std::exception&) {
          // Closing is best effort: its engine may be going too.
        }
      }
    }
    int64_t from = 0;
    try {
      from = open_sessions(/*resume=*/true, saved);
    } catch (const std::exception& e) {
      // Another engine lost while reopening (its worker died too): again, within the bound.
      const int64_t failovers = [&] {
        std::lock_guard lock(mutex);
        return status_.failovers;
      }();
      if (!any_lost() || failovers >= kMaxFailovers) throw;
      reason = e.what();
      continue;
    }
    std::lock_guard lock(mutex);
    status_.last_failover = fmt::format("{}; continued from step {}", reason, from);
    status_.step = from;
    std::erase_if(history_, [from](const StepMetrics& m) { return m.step > from; });
    return from;
  }
}

void GrpoRun::Impl::close_sessions() {
  std::vector<detail::Pending<bool>> closed(policies.size());
  for (detail::PolicyState& p : policies) {
    if (p.open) detail::check_submitted(p.engine->close(closed[p.index].callback()), "close session");
  }
  for (detail::PolicyState& p : policies) {
    if (!p.open) continue;
    p.open = false;
    closed[p.index].get("close session");
  }
}

void GrpoRun::Impl::save(int64_t step, std::vector<StepMetrics>& metrics) {
  std::vector<detail::Pending<scheduler::SessionSnapshot>> snaps(policies.size());
  for (detail::PolicyState& p : policies) {
    detail::check_submitted(p.engine->snapshot(snaps[p.index].callback()), "snapshot");
  }
  for (detail::PolicyState& p : policies) {
    const scheduler::SessionSnapshot snap = snaps[p.index].get("snapshot " + p.config->name);
    catalog::CommitOptions co;
    co.actor = "grpo";
    co.step = step;
    co.metrics_json = metrics[p.index].to_json();
    co.optimizer_state = snap.optimizer.get();
    const catalog::Revision r =
        cat->commit_revision(config.tenant, p.config->name, *snap.weights, co);
    metrics[p.index].revision = r.id;
  }
}

void GrpoRun::Impl::report(const std::vector<StepMetrics>& metrics, int64_t step) {
  {
    std::lock_guard lock(mutex);
    status_.step = step;
    status_.last = metrics;
    history_.insert(history_.end(), metrics.begin(), metrics.end());
  }
  if (!callback) return;
  for (const StepMetrics& m : metrics) callback(m);
}

std::vector<int32_t> GrpoRun::Impl::encode_prompt(const std::string& text) const {
  std::vector<int32_t> ids = ctx.tokenizer->encode(text);
  if (ids.empty() && ctx.tokenizer->bos_id()) ids.push_back(*ctx.tokenizer->bos_id());
  SPINDLE_CHECK(!ids.empty(), invalid_argument, "prompt '{}' encodes to no tokens", text);
  return ids;
}

engine::SamplingParams GrpoRun::Impl::sampling(uint64_t seed, bool greedy) const {
  engine::SamplingParams sp;
  sp.max_tokens = config.max_tokens;
  sp.temperature = greedy ? 0.0f : config.temperature;
  sp.seed = seed;
  if (const auto eos = ctx.tokenizer->eos_id()) sp.stop_token_ids.push_back(*eos);
  if (ctx.model_config.eos_id >= 0 &&
      std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), ctx.model_config.eos_id) ==
          sp.stop_token_ids.end()) {
    sp.stop_token_ids.push_back(ctx.model_config.eos_id);
  }
  return sp;
}

std::string GrpoRun::Impl::tenant_key(const detail::PolicyState& p) const {
  return config.tenant + "/grpo/" + p.config->name;
}

}  // namespace spindle::rl
