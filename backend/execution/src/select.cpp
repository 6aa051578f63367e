// The execution-backend selector (select.h).

#include "spindle/execution/select.h"

#include <charconv>

#include "spindle/core/error.h"
#include "spindle/engine/backend_cpu.h"
#include "spindle/engine/lora.h"
#ifdef SPINDLE_HAVE_CUDA
#include "spindle/engine_cuda/execution_backend.h"
#include "spindle/kernels/cuda/runtime.h"
#endif

namespace spindle::execution {

bool cuda_built() {
#ifdef SPINDLE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef SPINDLE_HAVE_CUDA
  return kernels::cuda::device_count();
#else
  return 0;
#endif
}

engine::Device resolve_device(std::string_view spec) {
  if (spec == "cpu") return {};
  if (spec == "auto") {
    return cuda_device_count() > 0 ? engine::Device{engine::DeviceKind::cuda, 0} : engine::Device{};
  }
  int32_t index = 0;
  if (spec != "cuda") {
    SPINDLE_CHECK(spec.starts_with("cuda:"), invalid_argument,
                  "device '{}' is not one of auto, cpu, cuda, cuda:N", spec);
    const std::string_view n = spec.substr(5);
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    SPINDLE_CHECK(ec == std::errc() && end == n.data() + n.size() && index >= 0 && !n.empty(),
                  invalid_argument, "device '{}': '{}' is not a CUDA ordinal (cuda:0, cuda:1, ...)",
                  spec, n);
  }
  SPINDLE_CHECK(cuda_built(), unsupported,
                "device '{}': this build of Spindle has no CUDA engine (configure with "
                "SPINDLE_WITH_CUDA=ON where nvcc exists); use --device cpu",
                spec);
  const int n = cuda_device_count();
  SPINDLE_CHECK(index < n, unsupported, "device '{}' does not exist: this machine has {} usable "
                "CUDA device(s){}", spec, n, n == 0 ? " (no GPU or no driver); use --device cpu" : "");
  return {engine::DeviceKind::cuda, index};
}

DType resolve_dtype(std::string_view spec, const engine::Device& device) {
  const bool cpu = device.kind == engine::DeviceKind::cpu;
  if (spec == "auto") return cpu ? DType::f32 : DType::bf16;
  if (spec == "f32" || spec == "fp32" || spec == "float32") return DType::f32;
  if (spec == "bf16" || spec == "bfloat16") {
    SPINDLE_CHECK(!cpu, unsupported, "dtype bf16: the CPU engine computes in f32 only (use "
                  "--dtype f32 or auto, or a CUDA device)");
    return DType::bf16;
  }
  SPINDLE_THROW(invalid_argument, "dtype '{}' is not one of auto, bf16, f32", spec);
}

std::unique_ptr<engine::ExecutionBackend> open_backend(const engine::ModelWeights& weights,
                                                       const BackendChoice& choice) {
  const engine::Device device = resolve_device(choice.device);
  const DType dtype = resolve_dtype(choice.dtype, device);
  if (device.kind == engine::DeviceKind::cpu) return engine::make_cpu_backend(weights);
#ifdef SPINDLE_HAVE_CUDA
  return engine_cuda::make_cuda_backend(
      weights, {.device = device.index,
                .precision = dtype == DType::bf16 ? engine_cuda::Precision::bf16 : engine_cuda::Precision::fp32});
#else
  (void)dtype;
  SPINDLE_THROW(internal, "resolve_device returned a CUDA device in a build without CUDA");
#endif
}

std::unique_ptr<engine::SlotPool> open_slot_pool(const engine::ModelConfig& config,
                                                 const engine::LoraPoolOptions& options,
                                                 std::string_view spec) {
  const engine::Device device = resolve_device(spec);
  if (device.kind == engine::DeviceKind::cpu) {
    return std::make_unique<engine::LoraSlotPool>(config, options);
  }
#ifdef SPINDLE_HAVE_CUDA
  return engine_cuda::make_cuda_slot_pool(config, options, device.index);
#else
  SPINDLE_THROW(internal, "resolve_device returned a CUDA device in a build without CUDA");
#endif
}

}  // namespace spindle::execution
