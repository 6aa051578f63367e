#pragma once
// Where one policy of a GRPO run lives: its training session and the calls a run makes on it.
// A run in one process drives each policy through a LocalPolicyEngine over its scheduler; a
// cluster coordinator gives the run engines whose sessions live on workers (the daemon's
// service layer), and the run does not know which it has.
//
// Contract of every call:
//   - asynchronous: it returns at once; `done` runs exactly once, on any thread, with the
//     outcome (an error names what failed);
//   - ordered: calls on one engine run in the order made (the session's FIFO), so a sample made
//     after an optim_step sees the updated weights;
//   - returns false when the engine refused the call outright (its queue is full or it is
//     stopping); `done` then never runs.
// lost() becomes true, and stays true, when the engine's session is gone with the process or
// machine that held it (a lost worker): its calls in flight failed and later calls fail. The
// run then reopens every policy from its last saved revision on fresh engines (grpo_run.h).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spindle/engine/generator.h"
#include "spindle/engine/loss.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/optimizer.h"
#include "spindle/engine/trainer.h"
#include "spindle/scheduler/scheduler.h"

namespace spindle::rl {

class PolicyEngine {
 public:
  template <class T>
  using Done = std::function<void(scheduler::Outcome<T>)>;
  using Completions = std::vector<engine::Completion>;

  virtual ~PolicyEngine() = default;

  // Opens the session on `weights` with `adam`'s state at optimizer step `step`. Once.
  virtual bool open(engine::LoraWeights weights, engine::AdamW adam, int64_t step,
                    Done<bool> done) = 0;
  // Closes the session (its weights are dropped; saved revisions stay).
  virtual bool close(Done<bool> done) = 0;
  // num_samples completions of `prompt` from the session's current weights.
  virtual bool sample(std::vector<int32_t> prompt, int32_t num_samples,
                      engine::SamplingParams params, Done<Completions> done) = 0;
  // log p of every token of `tokens` after the ones before it under the BASE (no adapter);
  // entry 0 is 0.
  virtual bool base_logprobs(std::vector<int32_t> tokens, Done<std::vector<float>> done) = 0;
  // Loss and gradients of `data` accumulated into the session (backward always).
  virtual bool forward_backward(std::vector<engine::TrainDatum> data, engine::LossFn loss,
                                engine::LossConfig loss_config,
                                Done<scheduler::TrainBatchResult> done) = 0;
  virtual bool optim_step(engine::AdamParams params, Done<engine::OptimStepResult> done) = 0;
  // The session's weights and AdamW state after every call made before it.
  virtual bool snapshot(Done<scheduler::SessionSnapshot> done) = 0;

  virtual bool lost() const { return false; }
  // Where the session runs, for status and logs ("this process", "worker 2 'w1'").
  virtual std::string where() const = 0;
};

// Makes the engine of the run's policy `policy` (its catalog name, in the run's tenant).
using PolicyEngineFactory = std::function<std::unique_ptr<PolicyEngine>(const std::string& policy)>;

// The engine of a run in one process: a session in `scheduler`'s training pool. Jobs carry
// `tenant` for the scheduler's per-tenant round robin.
std::unique_ptr<PolicyEngine> make_local_policy_engine(scheduler::Scheduler& scheduler,
                                                       std::string tenant);

}  // namespace spindle::rl
