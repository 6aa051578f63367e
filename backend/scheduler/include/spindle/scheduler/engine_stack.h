#pragma once
// The serving side of a resident base, built one way for the daemon and for in-process GRPO
// (rl::LocalEngine): device slots <- host cache <- loader (DESIGN.md core idea 4) and the
// Scheduler whose engine thread owns them, over an execution backend of any device. The base
// itself (the backend, the tokenizer) is the caller's and must outlive the stack.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "spindle/adapters/host_cache.h"
#include "spindle/adapters/loader.h"
#include "spindle/adapters/residency.h"
#include "spindle/engine/backend.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/scheduler/scheduler.h"

namespace spindle::scheduler {

struct EngineStackOptions {
  int32_t serving_slots = 1;
  int32_t serving_max_rank = 1;
  size_t host_cache_bytes = size_t(1) << 20;
  int32_t loader_threads = 1;
  SchedulerOptions scheduler;
};

class EngineStack {
 public:
  // `load` feeds cold serving loads (adapters::blob_store_load_fn in the daemon). Starts the
  // scheduler's engine thread.
  EngineStack(engine::ExecutionBackend& backend, const engine::Tokenizer* tokenizer,
              adapters::LoadFn load, const EngineStackOptions& options);
  ~EngineStack();  // stops the scheduler (without draining) before the tiers go
  EngineStack(const EngineStack&) = delete;
  EngineStack& operator=(const EngineStack&) = delete;

  adapters::HostCache& host_cache() { return *host_cache_; }
  adapters::Loader& loader() { return *loader_; }
  Scheduler& scheduler() { return *scheduler_; }

 private:
  // Declaration order is destruction order reversed: the scheduler goes first.
  std::unique_ptr<adapters::HostCache> host_cache_;
  std::unique_ptr<engine::SlotPool> serving_pool_;
  std::unique_ptr<adapters::Loader> loader_;
  std::unique_ptr<adapters::ResidencyManager> residency_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace spindle::scheduler
