#pragma once
// An in-process engine for GRPO runs outside the daemon (`spindle grpo`, tests, benches): the
// base loaded once, its tokenizer, a one-slot serving tier (nothing is served, but the
// scheduler wants one) and a Scheduler whose training pool holds the runs' sessions — the same
// pieces the service builds (backend/service/src/daemon.cpp).

#include <filesystem>
#include <memory>

#include "spindle/adapters/host_cache.h"
#include "spindle/adapters/loader.h"
#include "spindle/adapters/residency.h"
#include "spindle/engine/model.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/scheduler/scheduler.h"

namespace spindle::rl {

struct LocalEngineOptions {
  int32_t training_slots = 8;
  int32_t max_rank = 32;
  int64_t token_budget = 2048;
  int64_t kv_blocks = 4096;
};

class LocalEngine {
 public:
  // Loads the model (HF dir or llama2.c .bin) and the tokenizer found beside it.
  explicit LocalEngine(const std::filesystem::path& model_path, LocalEngineOptions options = {});
  ~LocalEngine();  // stops the scheduler first

  const engine::ModelWeights& weights() const { return weights_; }
  const engine::Tokenizer& tokenizer() const { return *tokenizer_; }
  scheduler::Scheduler& scheduler() { return *scheduler_; }

 private:
  engine::ModelWeights weights_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<engine::LoraSlotPool> serving_pool_;
  std::unique_ptr<adapters::HostCache> cache_;
  std::unique_ptr<adapters::Loader> loader_;
  std::unique_ptr<adapters::ResidencyManager> residency_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
};

}  // namespace spindle::rl
