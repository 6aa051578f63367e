#pragma once
// GrpoRun's state (grpo_run.cpp: lifecycle, sessions, catalog; grpo_step.cpp: one step and
// evaluation). Everything but the guarded fields is touched by the run's thread only.

#include <future>
#include <optional>

#include "spindle/catalog/catalog.h"
#include "spindle/rl/datasets.h"
#include "spindle/rl/grpo_run.h"
#include "spindle/rl/policy_engine.h"

namespace spindle::rl::detail {

struct PolicyState {
  const PolicyConfig* config = nullptr;
  size_t index = 0;
  Dataset data;
  uint64_t seed = 0;  // data order and sampling seeds of this policy
  std::unique_ptr<PolicyEngine> engine;  // its session's (policy_engine.h)
  bool open = false;
};

// A job's outcome through a future; get() throws the job's error as spindle::Error.
template <class T>
struct Pending {
  std::shared_ptr<std::promise<scheduler::Outcome<T>>> promise =
      std::make_shared<std::promise<scheduler::Outcome<T>>>();
  std::future<scheduler::Outcome<T>> future = promise->get_future();
  std::function<void(scheduler::Outcome<T>)> callback() {
    auto p = promise;
    return [p](scheduler::Outcome<T> o) { p->set_value(std::move(o)); };
  }
  T get(const std::string& what) {
    scheduler::Outcome<T> o = future.get();
    if (!o.ok()) throw Error(o.error.code, what + ": " + o.error.message);
    return std::move(*o.value);
  }
};

// Throws resource when the scheduler refused a job (queue full or stopping).
void check_submitted(bool ok, const std::string& what);

}  // namespace spindle::rl::detail

namespace spindle::rl {

struct GrpoRun::Impl {
  const RunConfig& config;
  RunContext ctx;
  RunOptions options;
  std::function<void(const StepMetrics&)> callback;
  std::vector<detail::PolicyState> policies;
  std::unique_ptr<rewards::RewardScorer> scorer;
  std::unique_ptr<catalog::Catalog> cat;
  std::atomic<bool> stop_requested{false};

  mutable std::mutex mutex;  // guards status_ and history_
  RunStatus status_;
  std::vector<StepMetrics> history_;

  Impl(const RunConfig& c, RunContext context, RunOptions o)
      : config(c), ctx(std::move(context)), options(o) {}

  void execute();  // the whole run on the calling thread
  void prepare();
  // Opens every policy's session on a fresh engine: from its head revision (weights, AdamW
  // state, step) when it has one and `resume`, else a fresh init. Returns the step to continue
  // after (0 for a fresh run).
  // at_step: reopen from each policy's revision of that step (a failover: the run's last
  // complete save), else its head.
  int64_t open_sessions(bool resume, std::optional<int64_t> at_step = std::nullopt);
  void close_sessions();
  // After a lost engine: closes what still answers, drops later steps from history_, reopens
  // every policy from its last save. Returns the step to continue after.
  int64_t fail_over(const std::string& why, int64_t saved);
  bool any_lost() const;
  std::vector<StepMetrics> step(int64_t step);
  // Greedy held-out evaluation of every policy; fills eval_* of metrics[k].
  void evaluate(std::vector<StepMetrics>& metrics);
  void save(int64_t step, std::vector<StepMetrics>& metrics);
  void report(const std::vector<StepMetrics>& metrics, int64_t step);

  std::vector<int32_t> encode_prompt(const std::string& text) const;
  engine::SamplingParams sampling(uint64_t seed, bool greedy) const;
  std::string tenant_key(const detail::PolicyState& p) const;
};

}  // namespace spindle::rl
