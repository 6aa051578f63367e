#include "spindle/rl/local_engine.h"

#include "spindle/core/error.h"
#include "spindle/engine/loader.h"
#include "spindle/execution/select.h"

namespace spindle::rl {

namespace {

scheduler::EngineStackOptions stack_options(const LocalEngineOptions& o) {
  scheduler::EngineStackOptions s;  // one serving slot: nothing is served, the scheduler wants one
  s.scheduler.token_budget = o.token_budget;
  s.scheduler.training_slots = o.training_slots;
  s.scheduler.training_max_rank = o.max_rank;
  s.scheduler.kv_blocks = o.kv_blocks;
  s.scheduler.train_tokens_per_pass = o.train_tokens_per_pass;
  return s;
}

}  // namespace

LocalEngine::LocalEngine(const std::filesystem::path& model_path, LocalEngineOptions o)
    : weights_(engine::load_model(model_path)),
      backend_(execution::open_backend(weights_, {.device = o.device, .dtype = o.dtype})),
      tokenizer_(engine::load_tokenizer(engine::default_tokenizer_path(model_path))),
      stack_(std::make_unique<scheduler::EngineStack>(
          *backend_, tokenizer_.get(),
          [](const std::string& id) -> adapters::AdapterPtr {
            SPINDLE_THROW(not_found, "no served revision '{}' in a local GRPO engine", id);
          },
          stack_options(o))) {}

LocalEngine::~LocalEngine() = default;  // the stack stops the scheduler first

}  // namespace spindle::rl
