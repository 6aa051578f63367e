#pragma once
// The compute of DeviceTrainer (trainer.h): scoring the unembedding in row chunks (with its
// backward) and the backward through every layer, templated on the element type (float or
// bf16) and explicitly instantiated for both. The caller has validated the batch, run a
// hidden_only forward with keep_activations into `st` and uploaded the per-row loss inputs.

#include <cstdint>
#include <vector>

#include "spindle/engine/loss.h"
#include "spindle/engine_cuda/device_model.h"
#include "spindle/engine_cuda/train_grads.h"
#include "spindle/kernels/attention.h"
#include "spindle/kernels/cuda/loss.h"

namespace spindle::engine_cuda::internal {

// One unembedding chunk: rows [r0, r1) of x_final; its LoRA segments (renumbered from r0) are
// chunk_segs[seg_offset, seg_offset + seg_count) on the device.
struct ScoreChunk {
  int64_t r0 = 0, r1 = 0;
  int32_t seg_offset = 0, seg_count = 0;
};

// Device buffers reused across calls (grown, never shrunk). Activations-shaped tensors are
// the model's Precision; the per-row loss buffers are fp32 [T].
struct TrainScratch {
  DeviceTensor logits;                                        // [chunk, vocab]; dlogits in place
  DeviceTensor d_hidden;                                      // [T, dim] ∂loss/∂x_final
  DeviceTensor dx, d_xn;                                      // [T, dim]
  DeviceTensor d_act, d_gate, d_up;                           // [T, hidden]
  DeviceTensor d_attn, dq, dq_pre;                            // [T, q_dim]
  DeviceTensor dk, dk_pre, dv;                                // [T, kv_dim]
  DeviceTensor lora_h, lora_dh;                               // [T, max_rank] fp32
  DeviceTensor moe_d_act, moe_d_gate, moe_d_up;               // [T·top_k, expert_dim]
  DeviceTensor moe_d_weight;   // [T·top_k] fp32, by sorted row (DeviceOps)
  DeviceTensor moe_d_out;      // [T·top_k, dim] ∂loss/∂ the experts' outputs
  DeviceTensor moe_d_xg;       // [T·top_k, dim] ∂loss/∂ the experts' input rows
  DeviceTensor moe_d_logits;   // [T, n_experts] ∂loss/∂ router logits
  // Latent attention (the graph's names; DeviceOps' own: the padded heads' gradients).
  DeviceTensor mla_dkv, mla_dk_pe, mla_dc, mla_dc_raw, mla_dkv_lat, mla_dq_lat, mla_dq_lat_raw;
  DeviceTensor mla_d_attn_p, mla_dq_p, mla_dk_p, mla_dv_p;  // [T, H·P]
  kernels::cuda::DeviceBuffer<int32_t> targets;               // [T]
  kernels::cuda::DeviceBuffer<float> weight, q, adv;          // [T] loss inputs (0 / 1 when absent)
  kernels::cuda::DeviceBuffer<float> logp, lse, loss, dlogp;  // [T] outputs
  kernels::cuda::DeviceBuffer<uint8_t> clipped;               // [T]
  kernels::cuda::DeviceBuffer<kernels::LoraSegment> chunk_segs;
  std::vector<kernels::LoraSegment> host_chunk_segs;  // its host mirror (the GEMM path plans on it)
  kernels::cuda::DeviceBuffer<kernels::DenseSeq> dense_seqs;
  // The backward kernels' own scratch (attention's softmax statistics, the LoRA gradients'
  // row-chunk partial sums): the kernels never allocate; grown to the largest call.
  kernels::cuda::DeviceBuffer<unsigned char> kernel_scratch;
};

struct TrainContext {
  DeviceModel& model;
  const DeviceLoraPool& pool;
  DeviceForwardState& st;
  TrainScratch& scratch;
  DeviceLoraGrads* grads;  // null: forward only (no dlogits, no backward)
};

// One LoRA view and the slot-layout gradients its backward accumulates into: a dense module's,
// or one routed expert's block.
struct LoraGradTarget {
  kernels::cuda::DeviceLoraSlots view;
  float* dA = nullptr;
  float* dB = nullptr;
};

// Backward of y = x·Wᵀ + LoRA(x), W [n, k] row-major on the device, over `rows` rows:
// dx = dy·W + beta_dx·dx, then, when `lora` is non-null (and `segs` has adapted rows: the
// caller's check), dx += the LoRA part and lora's dA/dB accumulate. x: [rows, k] stride ld_x.
template <class T>
void linear_backward(TrainContext& ctx, const T* W, int64_t n, int64_t k,
                     const LoraGradTarget* lora, const T* x, int64_t ld_x, int64_t rows,
                     const T* dy, int64_t ld_dy, const kernels::cuda::DeviceSegments& segs, T* dx,
                     int64_t ld_dx, float beta_dx);

// Backward of y = x·Wᵀ + LoRA(x) for one (layer, target) over `rows` rows:
// dx = dy·W + beta_dx·dx, then (when `segs` has adapted rows and the pool holds the target)
// dx += the LoRA part and the slots' dA/dB accumulate. x: [rows, W.cols()] stride ld_x.
template <class T>
void project_backward(TrainContext& ctx, int64_t layer, engine::LoraTarget target, const T* x,
                      int64_t ld_x, int64_t rows, const DeviceTensor& W, const T* dy, int64_t ld_dy,
                      const kernels::cuda::DeviceSegments& segs, bool adapted, T* dx, int64_t ld_dx,
                      float beta_dx);

// Every chunk: logits → logp/lse → per-token loss terms; with ctx.grads, dlogits in place and
// the unembedding's backward into scratch.d_hidden (+ lm_head LoRA gradients).
template <class T>
void score_chunks(TrainContext& ctx, const std::vector<ScoreChunk>& chunks,
                  const kernels::cuda::LossParams& loss);

// Backward from scratch.d_hidden through the final norm and every layer, accumulating the LoRA
// gradients of the batch's slots into ctx.grads. Sequences start at position 0.
template <class T>
void backward_layers(TrainContext& ctx);

}  // namespace spindle::engine_cuda::internal
