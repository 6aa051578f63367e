#pragma once
// The adapter slot pool in device memory: the twin of engine::LoraSlotPool (engine/lora.h), with
// the same layout per (layer, target): A [max_slots, max_rank, d_in], B [max_slots, d_out,
// max_rank], rank [max_slots], scale [max_slots], all fp32 on the device. Routed experts' gate /
// up / down LoRA of a sparse layer are expert-major, as on the CPU: A [n_experts, max_slots,
// max_rank, d_in], B [n_experts, max_slots, d_out, max_rank], so expert e's block is an
// ordinary SGMV view; a slot's experts land with one strided copy per tensor.
//
// Loading is asynchronous and never blocks the batch loop: load() packs each (layer, target)
// pair on the host into a pinned staging buffer and issues one copy per packed tensor (plus one
// each for the rank and scale tables) on the pool's own loader stream, then records the slot's
// event. A dense module uploads only the rows of A / columns of B that the adapter or the
// slot's previous occupant use (max(rank, dirty)), so a rank-8 adapter in a max-rank-64 pool
// moves its own bytes, not 8x them; clear() touches no weights (the kernels read the first
// `rank` rows, none of a cleared slot). Routed experts' blocks upload whole (max_rank). A forward that uses the slot makes its stream wait on that event
// (wait_loaded); a forward on other slots never waits.
//
// Threading and ordering: one thread calls load/clear and the forwards (the engine loop).
// load() waits on the host for the *previous* load's copies to finish before reusing the
// staging buffer (the batch stream is never involved). Loading or clearing a slot that a
// queued forward still reads is the caller's bug (as for engine::LoraSlotPool: the residency
// layer never takes a slot an in-flight batch uses).

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "spindle/engine/lora.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/runtime.h"

namespace spindle::engine_cuda {

// The CUDA implementation of engine::SlotPool (engine/device.h).
class DeviceLoraPool final : public engine::SlotPool {
 public:
  // Same option checks as engine::LoraSlotPool (max_slots in [1, 4096], max_rank in [1, 128]).
  // The pool lives on the current CUDA device (`device` names it).
  DeviceLoraPool(const engine::ModelConfig& config, engine::LoraPoolOptions options,
                 engine::Device device = {engine::DeviceKind::cuda, 0});
  ~DeviceLoraPool() override;
  DeviceLoraPool(const DeviceLoraPool&) = delete;
  DeviceLoraPool& operator=(const DeviceLoraPool&) = delete;

  engine::Device device() const override { return device_; }
  int32_t max_slots() const override { return options_.max_slots; }
  int32_t max_rank() const override { return options_.max_rank; }
  const engine::ModelConfig& config() const { return config_; }

  // Validates `adapter` against the base and the pool (same checks and messages as
  // engine::LoraSlotPool::load; nothing changes on error), then queues its upload into `slot`.
  // The slot reads as occupied at once; forwards see the adapter through wait_loaded.
  void load(int32_t slot, const engine::LoraWeights& adapter) override;
  // Frees the slot: rank 0 for every module (queued on the loader stream).
  void clear(int32_t slot) override;
  bool occupied(int32_t slot) const override;  // invalid_argument outside [0, max_slots)
  int64_t rank(int32_t slot) const;   // 0 when free
  std::optional<int32_t> first_free() const override;

  // Makes `stream` wait until the last load/clear of `slot` has landed (cudaStreamWaitEvent;
  // no host wait).
  void wait_loaded(int32_t slot, cudaStream_t stream) const;
  // Host wait for every queued load.
  void synchronize() const override;
  cudaStream_t loader_stream() const { return loader_.get(); }

  // The SGMV view of one (layer, target); nullopt if the pool has no storage for the target.
  // Views carry host mirrors of the rank / scale tables (the pool's own, updated by load and
  // clear on the calling thread), so the LoRA backward can plan cuBLAS GEMMs on the host.
  std::optional<kernels::cuda::DeviceLoraSlots> view(int64_t layer,
                                                     engine::LoraTarget target) const;
  // The SGMV view of expert `expert`'s gate / up / down LoRA on a routed-experts layer (every
  // slot); nullopt if the layer is dense or the pool has no storage for the target.
  std::optional<kernels::cuda::DeviceLoraSlots> expert_view(int64_t layer,
                                                            engine::LoraTarget target,
                                                            int64_t expert) const;
  size_t bytes() const override;

 private:
  struct Module {
    kernels::cuda::DeviceBuffer<float> A;  // [max_slots, max_rank, d_in]
    kernels::cuda::DeviceBuffer<float> B;  // [max_slots, d_out, max_rank]
    int64_t d_in = 0, d_out = 0;
    int64_t index = 0;  // row of the rank / scale tables
    // Dense modules, per slot: rows of A / columns of B at and past it are zero on the device,
    // so a load uploads [0, max(rank, dirty)) and no more (engine::LoraSlotPool's scheme).
    std::vector<int32_t> dirty;
  };
  Module* module(int64_t layer, engine::LoraTarget target);
  const Module* module(int64_t layer, engine::LoraTarget target) const;
  // Expert modules: A [n_experts, max_slots, max_rank, d_in], B [n_experts, max_slots, d_out,
  // max_rank]; one row of the rank / scale tables each.
  Module* expert_module(int64_t layer, engine::LoraTarget target);
  const Module* expert_module(int64_t layer, engine::LoraTarget target) const;
  void check_slot(int32_t slot) const;
  void load_now(int32_t slot, const engine::LoraWeights& adapter);  // load(), unguarded
  void clear_now(int32_t slot);
  // Queues the rank/scale tables (host mirrors) to the device and records `slot`'s event.
  void upload_tables_and_record(int32_t slot, size_t staging_offset);
  void wait_staging_free();

  engine::ModelConfig config_;
  engine::LoraPoolOptions options_;
  engine::Device device_;
  std::vector<std::array<std::optional<Module>, engine::kLoraTargetCount>> modules_;  // [layer]
  std::vector<std::array<std::optional<Module>, engine::kExpertProjCount>> expert_modules_;
  int64_t n_modules_ = 0;
  // [n_modules, max_slots] host mirrors and device tables.
  std::vector<int32_t> rank_host_;
  std::vector<float> scale_host_;
  kernels::cuda::DeviceBuffer<int32_t> rank_dev_;
  kernels::cuda::DeviceBuffer<float> scale_dev_;
  std::vector<int64_t> slot_rank_;  // [max_slots], 0 = free
  std::vector<bool> occupied_;

  kernels::cuda::Stream loader_;
  void* staging_ = nullptr;  // pinned host memory (cudaMallocHost)
  size_t staging_bytes_ = 0;
  cudaEvent_t staging_free_ = nullptr;  // recorded after the last queued copy
  std::vector<cudaEvent_t> loaded_;     // [max_slots]
};

}  // namespace spindle::engine_cuda
