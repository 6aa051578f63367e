#pragma once
// The layer compute of DeviceModel::forward, templated on the element type (float or bf16) and
// explicitly instantiated for both in device_forward.cpp. The caller (device_model.cpp) has
// validated the batch and laid out the state's tables (host and device).

#include <span>

#include "spindle/engine_cuda/device_model.h"

namespace spindle::engine_cuda::internal {

struct ForwardContext {
  const DeviceWeights& weights;
  kernels::cuda::Blas& blas;
  cudaStream_t stream;
  const DeviceLoraPool* lora;  // may be null
  DeviceForwardState& st;
};

// Embedding, every layer (K/V into `cache`), final norm and, unless hidden_only, the logits.
template <class T>
void run_forward(ForwardContext& ctx, DeviceKvCache& cache, const DeviceForwardOptions& options);

// logits[0 : r1 − r0] = x_final[r0 : r1] · Uᵀ (+ lm_head LoRA over `segments`, already on the
// device and renumbered from r0; `count` segments, `adapted` when any has slot >= 0).
template <class T>
void run_unembed(ForwardContext& ctx, int64_t r0, int64_t r1,
                 const kernels::LoraSegment* segments, int32_t count, bool adapted,
                 DeviceTensor& logits);

}  // namespace spindle::engine_cuda::internal
