#pragma once
// The CPU implementation of the execution-backend interface (backend.h): engine::Model's
// forward, engine::LoraSlotPool, engine::KvCache and engine::LoraTrainer, in f32.

#include <cstddef>
#include <memory>
#include <utility>

#include "spindle/engine/backend.h"
#include "spindle/engine/weights.h"

namespace spindle::engine {

// `weights` must outlive the backend; it is never modified.
std::unique_ptr<ExecutionBackend> make_cpu_backend(const ModelWeights& weights);

// Host RAM as the CPU backend reports it: MemAvailable and MemTotal of /proc/meminfo (0, 0
// where it cannot be read).
std::pair<size_t, size_t> host_memory_available_total();

}  // namespace spindle::engine
