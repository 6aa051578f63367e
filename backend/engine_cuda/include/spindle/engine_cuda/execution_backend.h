#pragma once
// The CUDA implementation of the execution-backend interface (engine/backend.h): the base
// resident in device memory (DeviceWeights, bf16 or f32), one DeviceModel (one stream, one
// cuBLAS handle) shared by the backend's runners and trainers, DeviceLoraPool slot pools
// (loads on their own stream), DeviceKvCache KV pools and DeviceTrainer. Every call maps CUDA
// failures at this boundary (device_errors.h): a device out of memory is ErrorCode::resource.
//
// Logits reach the host as fp32 and sampling runs there (engine::SampleStream, the same code
// on every device), so a seeded sample is the same token stream on the CPU and on CUDA for the
// same logits; on-device sampling is a fusion for the GPU-speed issue (docs/decisions.md).

#include <memory>

#include "spindle/engine/backend.h"
#include "spindle/engine/weights.h"
#include "spindle/engine_cuda/device_tensor.h"

namespace spindle::engine_cuda {

struct CudaBackendOptions {
  int32_t device = 0;                  // CUDA ordinal
  Precision precision = Precision::bf16;
  // Pure decode steps replay captured CUDA graphs (DeviceForwardOptions::use_graph).
  bool use_graph = true;
};

// Uploads `weights` to the device (synchronous); `weights` may be freed afterwards. Throws
// unsupported when the device does not exist, resource when the base does not fit.
std::unique_ptr<engine::ExecutionBackend> make_cuda_backend(const engine::ModelWeights& weights,
                                                           const CudaBackendOptions& options);

// A slot pool on CUDA device `device` with no resident base (benches and tools that measure
// loads alone); the errors of make_slot_pool.
std::unique_ptr<engine::SlotPool> make_cuda_slot_pool(const engine::ModelConfig& config,
                                                      const engine::LoraPoolOptions& options,
                                                      int32_t device);

}  // namespace spindle::engine_cuda
