#include "spindle/rl/local_engine.h"

#include "spindle/core/error.h"
#include "spindle/engine/loader.h"

namespace spindle::rl {

LocalEngine::LocalEngine(const std::filesystem::path& model_path, LocalEngineOptions o)
    : weights_(engine::load_model(model_path)) {
  model_ = std::make_unique<engine::Model>(weights_);
  tokenizer_ = engine::load_tokenizer(engine::default_tokenizer_path(model_path));
  serving_pool_ = std::make_unique<engine::LoraSlotPool>(
      weights_.config, engine::LoraPoolOptions{.max_slots = 1, .max_rank = 1});
  cache_ = std::make_unique<adapters::HostCache>(size_t(1) << 20);
  loader_ = std::make_unique<adapters::Loader>(
      *cache_,
      [](const std::string& id) -> adapters::AdapterPtr {
        SPINDLE_THROW(not_found, "no served revision '{}' in a local GRPO engine", id);
      },
      adapters::LoaderOptions{.threads = 1});
  residency_ = std::make_unique<adapters::ResidencyManager>(*serving_pool_, *cache_, *loader_);
  scheduler::SchedulerOptions so;
  so.token_budget = o.token_budget;
  so.training_slots = o.training_slots;
  so.training_max_rank = o.max_rank;
  so.kv_blocks = o.kv_blocks;
  scheduler_ = std::make_unique<scheduler::Scheduler>(*model_, tokenizer_.get(), *serving_pool_,
                                                      *residency_, so);
}

LocalEngine::~LocalEngine() {
  if (scheduler_) scheduler_->stop(/*drain=*/false);
  scheduler_.reset();
}

}  // namespace spindle::rl
