#pragma once
// LoRA gradient buffers on the device, in the slot pool's layout: the twin of engine::LoraGrads
// (engine/model.h). Per (layer, target) the pool stores, fp32:
//   dA = [max_slots, max_rank, d_in],  dB = [max_slots, d_out, max_rank]
// so the SGMV backward kernels (kernels/cuda/lora.h) accumulate straight into them. Entries
// beyond a slot's rank stay zero (the kernels never write them, zero_slot clears them). Routed
// experts' gate / up / down are expert-major as in the pool: dA [n_experts, max_slots, max_rank,
// d_in], dB [n_experts, max_slots, d_out, max_rank].
//
// Threading: owned by one engine loop; every call queues on the given stream.

#include <array>
#include <cstdint>
#include <vector>

#include "spindle/engine/lora.h"
#include "spindle/engine_cuda/device_lora_pool.h"
#include "spindle/kernels/cuda/runtime.h"

namespace spindle::engine_cuda {

class DeviceLoraGrads {
 public:
  // Allocates (zeroed) gradient storage for every (layer, target) the pool holds.
  explicit DeviceLoraGrads(const DeviceLoraPool& pool);

  float* dA(int64_t layer, engine::LoraTarget target);  // null when the pool lacks the target
  float* dB(int64_t layer, engine::LoraTarget target);
  const float* dA(int64_t layer, engine::LoraTarget target) const;
  const float* dB(int64_t layer, engine::LoraTarget target) const;
  // Expert `expert`'s [max_slots, ...] block of a sparse layer's gate / up / down (the pool's
  // expert_view layout); null when the pool has no expert storage there.
  float* expert_dA(int64_t layer, engine::LoraTarget target, int64_t expert);
  float* expert_dB(int64_t layer, engine::LoraTarget target, int64_t expert);
  const float* expert_dA(int64_t layer, engine::LoraTarget target, int64_t expert) const;
  const float* expert_dB(int64_t layer, engine::LoraTarget target, int64_t expert) const;

  // Zeroes every gradient region of `slot` (queued on `stream`).
  void zero_slot(int32_t slot, cudaStream_t stream);
  size_t bytes() const;

 private:
  struct Pair {
    kernels::cuda::DeviceBuffer<float> dA, dB;
    int64_t d_in = 0, d_out = 0;
  };
  Pair* pair(int64_t layer, engine::LoraTarget target);
  Pair* expert_pair(int64_t layer, engine::LoraTarget target);

  int64_t max_slots_ = 0;
  int64_t max_rank_ = 0;
  int64_t n_experts_ = 0;
  std::vector<std::array<Pair, engine::kLoraTargetCount>> pairs_;  // [n_layers]
  std::vector<std::array<Pair, engine::kExpertProjCount>> expert_pairs_;  // [n_layers]
};

// Copies one slot's rows/columns of a pool-layout pair (A [max_slots, max_rank, d_in],
// B [max_slots, d_out, max_rank], device fp32) into an adapter-shaped LoraPair of rank r
// (A [r, d_in], B [d_out, r]). Waits for `stream` (synchronous).
engine::LoraPair download_slot_pair(const float* A_pool, const float* B_pool, int32_t slot,
                                    int64_t max_rank, int64_t r, int64_t d_in, int64_t d_out,
                                    cudaStream_t stream);

}  // namespace spindle::engine_cuda
