#pragma once
// LoRA training on a CUDA device: the twin of engine::LoraTrainer (engine/trainer.h, read it
// first) over a DeviceModel and a DeviceLoraPool. Same batch validation and messages, same
// losses (engine::LossFn with LossConfig), same outputs (per-token logprobs, loss sum, token
// count, clip count) and the same Tinker semantics: forward_backward accumulates gradients
// (several calls may precede a step), optim_step applies AdamW and zeroes them.
//
// Where things live: the trained adapter's master weights ARE the slot's fp32 A/B in the
// device pool (attach uploads them once; optim_step updates them in place, so the next forward
// sees the new weights without a copy). Gradients are fp32 in the pool layout
// (DeviceLoraGrads); AdamW moments are fp32 device buffers per slot. Per step only scalars
// cross to the host (the loss terms per token and the gradient norm); weights(slot) downloads.
//
// forward_backward: a hidden_only forward with activations kept over the rows of every datum
// (grouped by slot, so SGMV segments are long), the unembedding in row chunks (the [T, vocab]
// logits never exist at once): target_logprobs → token_losses → target_logprobs_backward in
// place → unembedding backward; then backward through every layer (rmsnorm, inverse RoPE,
// attention, SwiGLU backward, dense dx GEMMs, SGMV backward for the adapter gradients). On a
// routed-experts base (Qwen3-MoE) the experts' LoRA trains too (one GEMM per expert segment,
// the router's backward on the host as engine::route_experts_backward); the router's aux loss
// (output_router_logits) is refused at attach, naming --device cpu.
//
// Threading: one caller at a time; all work runs on the model's stream. Nothing else may run
// the slots being trained while a call is in progress.

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "spindle/engine/loss.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/optimizer.h"
#include "spindle/engine/trainer.h"
#include "spindle/engine_cuda/device_model.h"
#include "spindle/engine_cuda/train_grads.h"
#include "spindle/kernels/cuda/adamw.h"

namespace spindle::engine_cuda {

namespace internal {
struct TrainScratch;
}

struct DeviceTrainerOptions {
  // Logits rows scored per unembedding chunk; 0 = as many as fit in unembed_chunk_bytes.
  int64_t unembed_chunk_rows = 0;
  size_t unembed_chunk_bytes = size_t(256) << 20;
};

class DeviceTrainer {
 public:
  // `model` and `pool` must outlive the trainer; the pool's slots being trained belong to it.
  DeviceTrainer(DeviceModel& model, DeviceLoraPool& pool, DeviceTrainerOptions options = {});
  ~DeviceTrainer();
  DeviceTrainer(const DeviceTrainer&) = delete;
  DeviceTrainer& operator=(const DeviceTrainer&) = delete;

  // Starts training `weights` in `slot`: loads it into the pool (validated there), resumes
  // `optimizer` (engine::validate_lora_optimizer; empty = step 0, zero moments; its moments are
  // uploaded into the slot's padded layout), stale gradients of the slot dropped. Nothing
  // changes on a validation error.
  void attach(int32_t slot, const engine::LoraWeights& weights,
              const engine::AdamW& optimizer = {});
  void detach(int32_t slot);  // the slot keeps its adapter in the pool
  bool attached(int32_t slot) const { return states_.count(slot) != 0; }

  // Every datum's slot must be attached. Validates the whole batch before any work.
  engine::ForwardBackwardOutput forward_backward(std::span<const engine::TrainDatum> batch,
                                                 engine::LossFn fn,
                                                 const engine::LossConfig& config = {});
  // Loss and logprobs only (no gradients).
  engine::ForwardBackwardOutput forward(std::span<const engine::TrainDatum> batch,
                                        engine::LossFn fn, const engine::LossConfig& config = {});
  // AdamW over the slot's tensors (the optional clip over their global norm), then zeroes the
  // slot's gradients. grad_norm is the norm before clipping, as engine::AdamW reports it.
  engine::OptimStepResult optim_step(int32_t slot, const engine::AdamParams& params);
  // Sums the slot's gradient regions across a data-parallel group (engine/backend.h): in place
  // on the device for an NCCL group (one NCCL group call, on the model's stream), staged
  // through host memory for a Gloo one.
  void reduce_gradients(int32_t slot, AllReduce& group);

  // The adapter as trained so far, downloaded from its slot (adapter-shaped, fp32).
  engine::LoraWeights weights(int32_t slot) const;
  // Gradients accumulated since the last step, adapter-shaped (a download).
  engine::LoraWeights grads(int32_t slot) const;
  int64_t step_count(int32_t slot) const;
  // The slot's AdamW state downloaded into engine::AdamW's layout (adapter-shaped moments by
  // parameter name, the step count): bit-exact what attach() was given after no step, and what
  // a CPU trainer resumes from (engine::LoraTrainer::attach). Empty moments at step 0.
  engine::AdamW optimizer(int32_t slot) const;

 private:
  struct State;
  State& state(int32_t slot);
  const State& state(int32_t slot) const;
  engine::ForwardBackwardOutput run(std::span<const engine::TrainDatum> batch, engine::LossFn fn,
                                    const engine::LossConfig& config, bool backward);
  // Rows of the batch laid out by slot; forward with activations kept. Returns each datum's
  // first row.
  std::vector<int64_t> forward_batch(std::span<const engine::TrainDatum> batch);
  engine::LoraWeights download(int32_t slot, bool gradients) const;

  DeviceModel& model_;
  DeviceLoraPool& pool_;
  DeviceTrainerOptions options_;
  DeviceLoraGrads grads_;
  std::map<int32_t, std::unique_ptr<State>> states_;
  DeviceForwardState fwd_;
  std::unique_ptr<DeviceKvCache> cache_;  // grown to the largest batch seen
  std::unique_ptr<internal::TrainScratch> scratch_;
};

}  // namespace spindle::engine_cuda
