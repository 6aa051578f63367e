#pragma once
// Choosing the execution backend at run time (`spindled --device auto|cpu|cuda[:N] --dtype
// auto|bf16|f32`, the `device` / `dtype` config keys). The one place that knows which
// implementations exist: everything above holds engine::ExecutionBackend only.

#include <memory>
#include <string>
#include <string_view>

#include "spindle/core/dtype.h"
#include "spindle/engine/backend.h"
#include "spindle/engine/weights.h"

namespace spindle::execution {

struct BackendChoice {
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  std::string dtype = "auto";   // auto | bf16 | f32 (auto: bf16 on CUDA, f32 on the CPU)
};

// True when this build has the CUDA engine; cuda_device_count() is 0 without it or without a
// usable device (never throws).
bool cuda_built();
int cuda_device_count();

// "auto" is cuda:0 where a CUDA device is usable, else the CPU; "cuda" is cuda:0. Throws
// invalid_argument for a malformed spec and unsupported for a CUDA device this build or
// machine does not have (naming what it has).
engine::Device resolve_device(std::string_view spec);
// invalid_argument for a malformed dtype; unsupported for bf16 on the CPU.
DType resolve_dtype(std::string_view spec, const engine::Device& device);

// The backend for `choice` over `weights` (which must outlive a CPU backend; a CUDA backend
// uploads them and keeps no reference).
std::unique_ptr<engine::ExecutionBackend> open_backend(const engine::ModelWeights& weights,
                                                       const BackendChoice& choice);

// A slot pool on the device `device` names (as resolve_device) with no resident base: benches
// and tools that measure adapter loads alone.
std::unique_ptr<engine::SlotPool> open_slot_pool(const engine::ModelConfig& config,
                                                 const engine::LoraPoolOptions& options,
                                                 std::string_view device);

}  // namespace spindle::execution
