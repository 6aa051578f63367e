// The serving tiers and scheduler of a resident base (engine_stack.h).

#include "spindle/scheduler/engine_stack.h"

namespace spindle::scheduler {

EngineStack::EngineStack(engine::ExecutionBackend& backend, const engine::Tokenizer* tokenizer,
                         adapters::LoadFn load, const EngineStackOptions& o)
    : host_cache_(std::make_unique<adapters::HostCache>(o.host_cache_bytes)),
      serving_pool_(backend.make_slot_pool(
          engine::LoraPoolOptions{.max_slots = o.serving_slots, .max_rank = o.serving_max_rank})),
      loader_(std::make_unique<adapters::Loader>(*host_cache_, std::move(load),
                                                 adapters::LoaderOptions{.threads = o.loader_threads})),
      residency_(std::make_unique<adapters::ResidencyManager>(*serving_pool_, *host_cache_, *loader_)),
      scheduler_(std::make_unique<Scheduler>(backend, tokenizer, *serving_pool_, *residency_,
                                             o.scheduler)) {}

EngineStack::~EngineStack() {
  if (scheduler_) scheduler_->stop(/*drain=*/false);
  scheduler_.reset();
}

}  // namespace spindle::scheduler
