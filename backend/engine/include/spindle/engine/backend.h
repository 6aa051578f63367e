#pragma once
// The execution-backend interface (DESIGN.md "Execution backends"): everything the scheduler,
// the residency manager, EngineStack, rl and the service need from an engine, with a CPU
// implementation (engine/backend_cpu.h) and a CUDA one (engine_cuda/execution_backend.h) chosen at run
// time (execution/select.h). vLLM's punica_base.py is the model for stating each call's exact
// semantics here; callers hold only these types and never learn which implementation runs.
//
// Objects a backend makes (slot pools, KV pools, runners, trainers) belong to that backend and
// must not outlive it. Threading: ONE thread drives a backend and everything it made (the
// scheduler's engine thread); the CUDA implementation queues all compute on one stream.
//
// Errors: spindle::Error with a code, as everywhere in the backend. A device out of memory is
// ErrorCode::resource naming what was being allocated; a failing device call is
// ErrorCode::internal naming the call and where it was made.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "spindle/core/all_reduce.h"
#include "spindle/engine/device.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/loss.h"
#include "spindle/engine/model.h"
#include "spindle/engine/optimizer.h"
#include "spindle/engine/trainer.h"

namespace spindle::engine {

// Host fp32 logits of the last forward: rows × vocab, row-major. Valid until the next forward
// on the same runner.
struct LogitsView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t vocab = 0;
  const float* row(int64_t i) const { return data + i * vocab; }
};

// Runs forwards over ragged heterogeneous batches; owns the scratch state of its forwards.
class BatchRunner {
 public:
  virtual ~BatchRunner() = default;
  // Runs `batch` (each sequence's new tokens, its KV sequence in `kv`, its adapter slot in
  // `lora`, −1 = base only; `lora` may be null when every slot is −1), appending every new
  // token's K/V to `kv`. Returns host fp32 logits: one row per sequence (last_token) or per new
  // token in batch order (all_tokens); hidden_only is not offered here. Validates the batch
  // first (token ids < vocab, slots in range and occupied, context <= max_seq_len, KV blocks
  // available, pools of this backend's device); on error nothing is appended. Returns after
  // the logits are on the host.
  virtual LogitsView forward(std::span<const BatchSequence> batch, KvPool& kv,
                             const SlotPool* lora, LogitsFor logits) = 0;
};

// LoRA training over the resident base (engine/trainer.h states the Tinker semantics):
// forward_backward accumulates gradients (several calls may precede a step), optim_step
// applies AdamW to one slot and zeroes its gradients. Rows of every datum of one call run
// through ONE forward/backward over the shared base (K policies in one pass), and each slot
// gets exactly the gradient it would get alone. The trainer owns the slots it trains in its
// pool: the slot's contents ARE the trained weights after every step (so a forward through the
// pool sees them without a copy).
class Trainer {
 public:
  virtual ~Trainer() = default;
  // Starts training `weights` in `slot` of the trainer's pool (validated and loaded there),
  // resuming `optimizer` (its step count and moments; empty = step 0). The optimizer's
  // parameter set must be the adapter's (names `<module key>.lora_A.weight` / `.lora_B.weight`
  // with the adapter's shapes), or invalid_argument. Stale gradients of the slot are dropped.
  virtual void attach(int32_t slot, LoraWeights weights, AdamW optimizer) = 0;
  // Stops training the slot; it keeps its adapter in the pool.
  virtual void detach(int32_t slot) = 0;
  virtual bool attached(int32_t slot) const = 0;
  // Every datum's slot must be attached. Validates the whole batch before any work.
  virtual ForwardBackwardOutput forward_backward(std::span<const TrainDatum> batch, LossFn fn,
                                                 const LossConfig& config) = 0;
  // Loss and logprobs only (no gradients).
  virtual ForwardBackwardOutput forward(std::span<const TrainDatum> batch, LossFn fn,
                                        const LossConfig& config) = 0;
  virtual OptimStepResult optim_step(int32_t slot, const AdamParams& params) = 0;
  // Data-parallel training (issue 17): sums the slot's gradients accumulated since its last
  // step across `group`'s ranks, in place (core/all_reduce.h states the sum), so the
  // optim_step that follows applies the gradient of the whole batch on every rank. Every rank
  // calls it exactly once before each optim_step, a rank without data since the last step
  // too (its gradients are zero). A group whose memory() is not this backend's is
  // unsupported; the group's failures propagate (Error(io)) and leave the gradients as they
  // were or summed, never half of one tensor.
  virtual void reduce_gradients(int32_t slot, AllReduce& group) = 0;
  // Copies to the host: the weights as trained so far (adapter-shaped f32), the AdamW state
  // (the same safetensors layout on every device, so a state saved on one device resumes on
  // another), the step count.
  virtual LoraWeights weights(int32_t slot) const = 0;
  // weights(slot) to keep: an immutable copy that other threads may read while training goes
  // on (a save's snapshot). Where the trained weights are host memory (the CPU engine) it is
  // them, handed out without a copy: the trainer copies them before it next changes them
  // (copy-on-write), so a save does not wait for a copy on the engine thread. Elsewhere (a
  // device download) it is weights(slot).
  virtual std::shared_ptr<const LoraWeights> share_weights(int32_t slot) {
    return std::make_shared<const LoraWeights>(weights(slot));
  }
  virtual AdamW optimizer(int32_t slot) const = 0;
  virtual int64_t step_count(int32_t slot) const = 0;
};

class ExecutionBackend {
 public:
  virtual ~ExecutionBackend() = default;
  virtual Device device() const = 0;
  // Element type of the resident base on the device: DType::f32 (the CPU, and CUDA's exactness
  // mode) or DType::bf16 (CUDA's default; fp32 accumulation). LoRA master weights, gradients
  // and AdamW moments are f32 on every device.
  virtual DType dtype() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual MemoryReport memory() const = 0;

  // Validated options (max_slots in [1, 4096], max_rank in [1, 128]).
  virtual std::unique_ptr<SlotPool> make_slot_pool(const LoraPoolOptions& options) = 0;
  virtual std::unique_ptr<KvPool> make_kv_pool(const KvCacheOptions& options) = 0;
  virtual std::unique_ptr<BatchRunner> make_runner() = 0;
  // A trainer over `pool` (made by this backend); the pool must outlive the trainer.
  virtual std::unique_ptr<Trainer> make_trainer(SlotPool& pool) = 0;
};

}  // namespace spindle::engine
