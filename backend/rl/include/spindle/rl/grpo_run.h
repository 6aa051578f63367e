#pragma once
// A server-side GRPO run over one or many LoRA policies on one resident base.
//
// Per step, for every policy at once: sample group_size completions for each of
// prompts_per_step prompts from the policy's LIVE training-session weights (all policies'
// sample jobs are submitted together, so the scheduler batches them), score them with the
// policy's reward spec (rewards::RewardScorer, a separate host process), compute group
// advantages (advantages.h; optional k3 KL to the base folded into per-token advantages),
// then submit every policy's forward_backward together (they merge into one pass when their
// loss and config agree) followed by its optim_step. Every save_every steps (and at the end,
// and on stop) each policy's weights + AdamW state become a catalog revision whose step is the
// run's step; every eval_every steps (and before the first step and after the last) greedy
// completions of the held-out prompts are scored.
//
// Loss scale: every completion token of a policy's step carries weight 1/N (N = that policy's
// completion tokens in the step), so the summed loss is a per-token mean and the learning rate
// does not depend on batch size.
//
// Entropy metric: the mean −log p of the sampled tokens (a one-sample estimate of the policy's
// entropy at temperature 1).
//
// Eval accuracy: the fraction of held-out prompts whose greedy completion gets the full reward:
// the term named eval_metric_term scores >= 1, or (no such term) the total reaches the spec's
// maximum Σ max(weight, 0) (assumes term scores in [0, 1]).
//
// Resume: the data order and sampling seeds are functions of (seed, step), so continuing from
// the policy's head revision (weights, AdamW state, step) reproduces the run's remaining steps.
//
// Engines (policy_engine.h): each policy's session lives on the engine RunContext::engines
// makes (a coordinator's: a session on a worker), else on RunContext::scheduler. When a step
// fails and an engine reports lost() (its worker died), the run fails over: it reopens every
// policy from its last saved revision on fresh engines and re-runs the steps since, which the
// (seed, step) rule makes the same steps; history() drops the lost steps' metrics, which come
// again. At most kMaxFailovers times per run; without a catalog there is nothing to continue
// from, and the run fails.
//
// Threading: start() runs the run on its own thread; run() runs it on the caller's. stop(),
// status() and history() may be called from any thread. The metrics callback runs on the run's
// thread.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "spindle/engine/tokenizer.h"
#include "spindle/rewards/rewards.h"
#include "spindle/rl/config.h"
#include "spindle/rl/policy_engine.h"
#include "spindle/scheduler/scheduler.h"

namespace spindle::rl {

// What a run drives; everything here must outlive the run.
struct RunContext {
  // The local scheduler (always: with `engines`, its intake hold is taken around a step's
  // forward_backward calls, and nothing else runs on it).
  scheduler::Scheduler* scheduler = nullptr;
  PolicyEngineFactory engines;  // null: every policy on `scheduler`
  engine::ModelConfig model_config;
  const engine::Tokenizer* tokenizer = nullptr;
  std::filesystem::path catalog_dir;  // "" = no catalog: nothing is saved, resume impossible
  std::string base_id;                // the base's catalog id (policies are created on it)
  std::filesystem::path data_root;    // built-in datasets live here (../shared/data)
  rewards::RewardHostOptions reward_host;
};

struct RunOptions {
  // Continue a policy that already has revisions from its head (weights, optimizer, step).
  // Without it, an existing policy with revisions is an error (invalid_argument).
  bool resume = false;
};

struct StepMetrics {
  std::string policy;
  int64_t step = 0;
  // Training (absent at the step-0 evaluation).
  bool trained = false;
  double reward_mean = 0.0, reward_std = 0.0;
  std::map<std::string, double> term_means;  // per reward term, unweighted
  double kl = 0.0;         // mean k3 per completion token (0 when kl_coef is 0)
  double entropy = 0.0;    // mean −log p of sampled tokens
  double loss = 0.0;       // per-token mean of the RL loss
  double clip_fraction = 0.0;
  double response_length = 0.0;  // mean completion tokens
  double tokens_per_s = 0.0;     // sampled tokens / sampling wall time (all policies)
  double step_time_s = 0.0;
  // Phases of step_time_s (all policies together; not in to_json): sampling, then rewards,
  // advantages, the base's logprobs (KL) and the training data; the rest is forward_backward
  // and optim_step.
  double sample_time_s = 0.0, reward_time_s = 0.0;
  int64_t dropped_groups = 0;
  double grad_norm = 0.0;
  // Evaluation (when this step evaluated).
  std::optional<double> eval_accuracy;
  std::optional<double> eval_reward;
  std::optional<std::string> revision;  // saved at this step
  std::string to_json() const;
};

enum class RunState : uint8_t { idle, running, finished, stopped, failed };
const char* run_state_name(RunState state);

struct RunStatus {
  RunState state = RunState::idle;
  int64_t step = 0;   // last finished step
  int64_t steps = 0;  // config.steps
  std::string error;  // failed: what happened
  int64_t failovers = 0;      // times the run continued from its last save after a lost engine
  std::string last_failover;  // why, and from which step
  std::vector<StepMetrics> last;  // the latest metrics of each policy
};

inline constexpr int64_t kMaxFailovers = 8;

class GrpoRun {
 public:
  // Validates the config (invalid_argument naming the field) and the context.
  GrpoRun(RunConfig config, RunContext context, RunOptions options = {});
  ~GrpoRun();  // stop() and join
  GrpoRun(const GrpoRun&) = delete;
  GrpoRun& operator=(const GrpoRun&) = delete;

  void on_metrics(std::function<void(const StepMetrics&)> callback);  // before start/run

  void start();  // runs on a new thread; status() reports failures
  void run();    // runs on this thread; throws what failed
  // Ends the run after the step in progress (saving it when a catalog is attached).
  void stop();
  void wait();   // joins start()'s thread

  RunStatus status() const;
  std::vector<StepMetrics> history() const;
  const RunConfig& config() const { return config_; }

 private:
  struct Impl;
  RunConfig config_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace spindle::rl
