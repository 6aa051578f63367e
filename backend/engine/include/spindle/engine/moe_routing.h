#pragma once
// The routed experts' choice (Qwen3-MoE's softmax router, DeepSeek-V3's sigmoid, group-limited,
// bias-steered one), written once for every engine: the CPU ops call it on their logits, the
// CUDA ops download the router logits, call it, and upload the grouping. A choice is a discrete
// decision taken on host floats, so the same logits give the same experts on every device.
//
// An assignment j = t·top_k + i is token t's i-th chosen expert. The grouping sorts the
// assignments by expert (stable in j), then each expert's assignments by adapter slot, so that
// one GEMM per expert segment and one SGMV segment per (expert, slot) run cover them.

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "spindle/engine/model_config.h"
#include "spindle/kernels/lora.h"

namespace spindle::engine {

struct MoeRouting {
  std::vector<int32_t> expert;   // [T·top_k] chosen expert of each assignment
  std::vector<int32_t> order;    // [T·top_k] assignments sorted by expert (stable in j)
  std::vector<int64_t> offsets;  // [n_experts + 1] expert e's sorted rows: [offsets[e], offsets[e+1])
  // Within each expert's rows, assignments are sorted by adapter slot too: expert e's LoRA
  // segments are lora_segs[lora_seg_offsets[e], lora_seg_offsets[e+1]), rows counted from
  // offsets[e] (rows of base-only tokens carry slot −1).
  std::vector<kernels::LoraSegment> lora_segs;
  std::vector<int64_t> lora_seg_offsets;  // [n_experts + 1]
};

// From the router logits `logits` [T, n_experts] (fp32, row-major): probs [T, n_experts] (the
// softmax, or the sigmoid), the top-k choice per token (scores + `router_bias` when the config
// has the correction bias, else `router_bias` may be null; group-limited when n_group > 1; ties
// to the lower expert index), `weight` [T·top_k] (the chosen probabilities, renormalised when
// norm_topk, times routed_scaling_factor), and `routing`'s expert / order / offsets and the
// (expert, slot) segments of the rows' adapter `segments` (rows no segment covers: slot −1).
void route_experts(const ModelConfig& config, const float* logits, const float* router_bias,
                   int64_t T, std::span<const kernels::LoraSegment> segments, float* probs,
                   float* weight, MoeRouting& routing);

// The router's load-balancing loss (HF load_balancing_loss_func) of a keep_activations forward,
// one per adapter slot (−1 = base rows): over the slot's tokens and every sparse layer (N
// routing rows), E · Σ_e f_e·P_e with f_e the fraction of its assignments that chose expert e
// (a constant) and P_e the mean router probability of e. `value` = aux_loss_coef · Σ_slots;
// grad[slot] = ∂value/∂probs[row, e] = coef·E·count_e / N² for each of the slot's rows.
struct MoeAuxLoss {
  double value = 0.0;
  std::map<int32_t, std::vector<float>> grad;  // slot -> [n_experts]
};

// route_experts' backward for T rows: from d_weight [T·top_k] (∂loss/∂ each assignment's
// combine weight, by assignment j) to d_logits [T, n_experts] through the renormalisation and
// the softmax (or the sigmoid, chosen experts only; the choice itself is a constant), plus the
// aux loss's gradient through the softmax when `aux` is non-null (each row's slot from
// `segments`, as route_experts). `probs` and `expert` are route_experts' outputs.
void route_experts_backward(const ModelConfig& config, const float* probs,
                            std::span<const int32_t> expert, const float* d_weight, int64_t T,
                            std::span<const kernels::LoraSegment> segments, const MoeAuxLoss* aux,
                            float* d_logits);

}  // namespace spindle::engine
