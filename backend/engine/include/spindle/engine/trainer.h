#pragma once
// Training over a resident base, Tinker-style: forward_backward accumulates gradients (several
// calls may precede a step), optim_step applies AdamW and zeroes them.
//
// LoraTrainer trains the adapters in any number of slots at once: the rows of every datum go
// through one forward/backward over the shared base (the heterogeneous batch of the SGMV
// contract), and each slot gets exactly the gradient it would get alone. Each trained slot owns
// its master weights (adapter-shaped fp32), gradient sums and AdamW state; after a step the
// slot in the pool is refreshed from the master weights. The base is never written.
//
// FullTrainer trains every base weight (full-parameter mode, for building small bases).
//
// Threading: one caller at a time per trainer; nothing else may run the model's pool slots
// being trained during a call.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "spindle/core/all_reduce.h"
#include "spindle/engine/loss.h"
#include "spindle/engine/model.h"
#include "spindle/engine/optimizer.h"

namespace spindle::engine {

// One training example (Tinker's Datum): input tokens at positions 0..n−1 and, aligned with
// them, the target token predicted at each position plus the loss inputs it needs.
struct TrainDatum {
  std::vector<int32_t> input_tokens;
  std::vector<int32_t> target_tokens;  // same length as input_tokens
  std::vector<float> weights;          // optional (1 each); 0 masks a token
  std::vector<float> logprobs;         // sampler's log q, for the RL losses
  std::vector<float> advantages;       // for the RL losses
  int32_t slot = -1;                   // adapter slot (LoraTrainer); ignored by FullTrainer
};

// Checks a training batch (LoraTrainer, FullTrainer and engine_cuda::DeviceTrainer share it):
// non-empty, each datum with input tokens and as many in-vocab targets, the loss config and
// the loss inputs `fn` needs (validate_loss_inputs). Throws invalid_argument naming the datum.
void validate_train_batch(std::span<const TrainDatum> batch, LossFn fn, const LossConfig& config,
                          const ModelConfig& model);

// Checks that `optimizer` is the AdamW state of `adapter` (every device keeps it in this layout,
// engine::AdamW's): no moments (a fresh state), or exactly one (m, v) per adapted tensor, named
// `<lora_module_key>.lora_A.weight` / `.lora_B.weight` and shaped like it. Throws
// invalid_argument naming `source` and the first tensor that is missing, extra or misshapen.
void validate_lora_optimizer(const AdamW& optimizer, const LoraWeights& adapter,
                             const std::string& source);

struct ForwardBackwardOutput {
  std::vector<std::vector<float>> logprobs;  // per datum, log p(target) per position
  LossMetrics metrics;
};

// PEFT initialisation: A ~ Kaiming-uniform(a = √5) = U(−1/√d_in, 1/√d_in) from `seed`, B = 0,
// so a new adapter reproduces the base exactly.
LoraWeights init_lora(const ModelConfig& config, int64_t rank, float alpha,
                      std::span<const LoraTarget> targets, uint64_t seed, bool use_rslora = false);

class LoraTrainer {
 public:
  LoraTrainer(const Model& model, LoraSlotPool& pool);

  // Starts training `weights` in `slot` (loaded into the pool), with optimizer state to resume
  // (validate_lora_optimizer; nothing changes on error).
  void attach(int32_t slot, LoraWeights weights, AdamW optimizer = {});
  void detach(int32_t slot);
  bool attached(int32_t slot) const { return states_.count(slot) != 0; }
  const LoraWeights& weights(int32_t slot) const;
  // The slot's weights themselves, to keep and read on any thread: the trainer never writes
  // them again. Its next optim_step steps a copy instead (copy-on-write); weights(slot) then
  // names that copy.
  std::shared_ptr<const LoraWeights> share_weights(int32_t slot);
  const AdamW& optimizer(int32_t slot) const;
  const LoraWeights& grads(int32_t slot) const;  // accumulated since the last step

  // Every datum's slot must be attached. Validates the whole batch before any work.
  ForwardBackwardOutput forward_backward(std::span<const TrainDatum> batch, LossFn fn,
                                         const LossConfig& config = {});
  // Loss and logprobs only (no gradients).
  ForwardBackwardOutput forward(std::span<const TrainDatum> batch, LossFn fn,
                                const LossConfig& config = {});
  OptimStepResult optim_step(int32_t slot, const AdamParams& params);
  // Sums the slot's gradients across a data-parallel group (host memory) in place: one sum over
  // every gradient tensor, in for_each_lora_tensor order (engine/backend.h states the call).
  void reduce_gradients(int32_t slot, AllReduce& group);

 private:
  struct State {
    std::shared_ptr<LoraWeights> weights;  // never null
    bool weights_shared = false;           // share_weights handed them out: copy before writing
    LoraWeights grads;
    AdamW adam;
  };
  State& state(int32_t slot);
  const State& state(int32_t slot) const;
  ForwardBackwardOutput run(std::span<const TrainDatum> batch, LossFn fn,
                            const LossConfig& config, bool backward);

  const Model& model_;
  LoraSlotPool& pool_;
  LoraGrads lora_grads_;
  std::map<int32_t, State> states_;
  ForwardState fwd_;
  Tensor d_hidden_;
};

class FullTrainer {
 public:
  // `weights` are trained in place; `model` must be built on the same weights.
  FullTrainer(const Model& model, ModelWeights& weights);

  ForwardBackwardOutput forward_backward(std::span<const TrainDatum> batch, LossFn fn,
                                         const LossConfig& config = {});
  OptimStepResult optim_step(const AdamParams& params);
  const AdamW& optimizer() const { return adam_; }
  const ModelWeights& grads() const { return grads_; }  // accumulated since the last step

 private:
  const Model& model_;
  ModelWeights& weights_;
  ModelWeights grads_;
  AdamW adam_;
  ForwardState fwd_;
  Tensor d_hidden_;
};

}  // namespace spindle::engine
