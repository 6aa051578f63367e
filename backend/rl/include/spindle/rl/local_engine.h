#pragma once
// An in-process engine for GRPO runs outside the daemon (`spindle grpo`, tests, benches): the
// base loaded once, its tokenizer, and the same scheduler::EngineStack the daemon builds (with a
// one-slot serving tier: nothing is served here) whose training pool holds the runs' sessions.

#include <filesystem>
#include <memory>

#include <string>

#include "spindle/engine/backend.h"
#include "spindle/engine/weights.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/scheduler/engine_stack.h"

namespace spindle::rl {

struct LocalEngineOptions {
  std::string device = "auto";  // execution/select.h: auto | cpu | cuda | cuda:N
  std::string dtype = "auto";   // auto | bf16 | f32
  int32_t training_slots = 8;
  int32_t max_rank = 32;
  int64_t token_budget = 2048;
  int64_t kv_blocks = 4096;
  // Most tokens in one trainer call (SchedulerOptions::train_tokens_per_pass); 0 = token_budget.
  // Caps the activation memory of a pass that merges many policies' forward_backward jobs.
  int64_t train_tokens_per_pass = 0;
};

class LocalEngine {
 public:
  // Loads the model (HF dir or llama2.c .bin) and the tokenizer found beside it.
  explicit LocalEngine(const std::filesystem::path& model_path, LocalEngineOptions options = {});
  ~LocalEngine();

  const engine::ModelWeights& weights() const { return weights_; }
  const engine::Tokenizer& tokenizer() const { return *tokenizer_; }
  engine::ExecutionBackend& backend() { return *backend_; }
  scheduler::Scheduler& scheduler() { return stack_->scheduler(); }

 private:
  engine::ModelWeights weights_;
  std::unique_ptr<engine::ExecutionBackend> backend_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<scheduler::EngineStack> stack_;
};

}  // namespace spindle::rl
