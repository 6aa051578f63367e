#pragma once
// The decoder forward pass over a ragged, heterogeneous batch.
//
// Every sequence in a batch brings its new tokens, its KV-cache sequence and its adapter slot
// (−1 = base only). All rows of all sequences share one base GEMM per projection; the LoRA path
// runs through the SGMV kernels with rows grouped into per-slot segments. Base weights are read
// only; the adapter pool is read only during a forward.
//
// The layer graph itself (which ops run in which order, what is kept for the backward) is
// engine::DecoderGraph (decoder_graph.h), shared with the CUDA engine; this class lays out the
// batch and runs the graph over the CPU's ops (src/cpu_ops.h). With
// ForwardOptions::keep_activations every layer's intermediate tensors stay in
// ForwardState::layers, which is everything the backward pass reads.

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "spindle/core/tensor.h"
#include "spindle/engine/kv_cache.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/moe_routing.h"
#include "spindle/engine/weights.h"

namespace spindle::engine {

struct BatchSequence {
  SeqId seq = -1;                   // KV-cache sequence; its length is where tokens start
  std::span<const int32_t> tokens;  // new tokens (>= 1)
  int32_t slot = -1;                // adapter slot, −1 = base only
};

enum class LogitsFor : uint8_t {
  last_token,  // one row per sequence (sampling)
  all_tokens,  // one row per new token (scoring, training)
  hidden_only,  // no logits: x_final holds every token's final hidden state; the caller
                // unembeds in row chunks (unembed / unembed_backward), so [T, vocab] never
                // exists at once (training)
};

struct ForwardOptions {
  LogitsFor logits = LogitsFor::last_token;
  bool keep_activations = false;  // keep per-layer intermediates for a backward pass
};

// Intermediates of a routed-experts MLP (Qwen3-MoE) over T rows: the choice and its grouping
// (MoeRouting, engine/moe_routing.h: assignment j = t·top_k + i, expert GEMMs over the
// assignments sorted by expert), so rows of xg/gate/up/act/out are in sorted order.
struct MoeActivations : MoeRouting {
  Tensor logits;  // [T, n_experts] router logits
  Tensor probs;   // [T, n_experts] softmax (or sigmoid) of the logits
  Tensor weight;  // [T·top_k] each assignment's combine weight (renormalised when norm_topk)
  Tensor xg;      // [T·top_k, dim] the assignments' input rows
  Tensor gate, up, act;  // [T·top_k, expert_dim]
  Tensor out;  // [T·top_k, dim] the experts' outputs (before the weights)
};

// Intermediates of Multi-head Latent Attention (ModelConfig::mla_attention) over T rows; H
// heads, R = kv_lora_rank, Q = q_lora_rank, dn / dr / dv the nope / rope / value head dims,
// P = max(dn + dr, dv). The query (after RoPE on each head's last dr columns) is
// LayerActivations::q, the attention output LayerActivations::attn [T, H·dv].
struct MlaActivations {
  Tensor q_lat;       // [T, Q] q_a_proj(xn)                       (Q > 0)
  Tensor q_latn;      // [T, Q] q_a_layernorm(q_lat)
  Tensor inv_rms_q;   // [T]
  Tensor kv_lat;      // [T, R + dr] kv_a_proj_with_mqa(xn)
  Tensor c_raw;       // [T, R] its latent columns
  Tensor ckv;         // [T, R] kv_a_layernorm(c_raw): what the cache holds, with k_pe
  Tensor inv_rms_kv;  // [T]
  Tensor k_pe;        // [T, dr] the shared RoPE key, rotated
  // The uncompressed form (keep_activations forwards, the backward reads it):
  Tensor kv;  // [T, H·(dn+dv)] kv_b_proj(ckv): per head the nope key, then the value
  Tensor q_p, k_p, v_p, attn_p;  // [T, H·P] per-head q, k = [k_nope, k_pe], v, zero-padded
  // The absorbed form over the latent cache (inference):
  Tensor q_abs;  // [T, H·(R+dr)] per head [q_nope·W_UK, q_pe]
  Tensor o_lat;  // [T, H·(R+dr)] attention over cached [ckv, k_pe] rows
};

// Intermediates of one decoder layer over the batch's T rows.
struct LayerActivations {
  Tensor x_in;      // [T, dim] residual stream entering the layer
  Tensor xn_attn;   // [T, dim] after attn_norm
  Tensor inv_rms_attn;  // [T]
  Tensor q_pre;     // [T, q_dim] projection before q_norm (Qwen3, keep_activations only)
  Tensor k_pre;     // [T, kv_dim] projection before k_norm (Qwen3, keep_activations only)
  Tensor inv_rms_q; // [T·n_heads]   (Qwen3)
  Tensor inv_rms_k; // [T·n_kv_heads] (Qwen3)
  Tensor q;         // [T, q_dim] after (q_norm and) RoPE
  Tensor k;         // [T, kv_dim] after (k_norm and) RoPE
  Tensor v;         // [T, kv_dim]
  Tensor attn;      // [T, q_dim] attention output before o_proj
  Tensor x_mid;     // [T, dim] residual after attention
  Tensor xn_mlp;    // [T, dim] after ffn_norm
  Tensor inv_rms_mlp;   // [T]
  Tensor gate;      // [T, hidden]
  Tensor up;        // [T, hidden]
  Tensor act;       // [T, hidden] silu(gate)·up
  MoeActivations moe;  // sparse layers only (gate/up/act hold the shared experts, if any)
  MlaActivations mla;  // latent attention only (q_pre, k, v, k_pre stay unused)
};

// The backward pass's working tensors (DecoderGraph::backward shapes them), reused.
struct BackwardScratch {
  Tensor dx, d_xn;             // [T, dim]
  Tensor d_act, d_gate, d_up;  // [T, hidden]
  Tensor d_attn, dq, dq_pre;   // [T, q_dim]
  Tensor dk, dk_pre, dv;       // [T, kv_dim]
  // Sparse layers: per assignment, in MoeActivations' sorted order.
  Tensor moe_d_act, moe_d_gate, moe_d_up;  // [T·top_k, expert_dim]
  Tensor moe_d_weight;                     // [T·top_k] ∂loss/∂combine weight (by assignment j)
  // Latent attention.
  Tensor mla_dkv;                     // [T, H·(dn+dv)]
  Tensor mla_dk_pe;                   // [T, dr]
  Tensor mla_dc, mla_dc_raw;          // [T, R]
  Tensor mla_dkv_lat;                 // [T, R + dr]
  Tensor mla_dq_lat, mla_dq_lat_raw;  // [T, Q]
};

// Everything a forward produced. Reused across calls to avoid reallocation.
struct ForwardState {
  int64_t T = 0;                        // rows (new tokens) in the batch
  bool keep_activations = false;        // as the last forward was run
  bool all_tokens = false;
  std::vector<int32_t> positions;       // [T]
  std::vector<int32_t> tokens;          // [T] input tokens (kept for the embedding backward)
  std::vector<int64_t> cache_slots;     // [T]
  std::vector<kernels::LoraSegment> segments;       // over all T rows
  std::vector<kernels::LoraSegment> out_segments;   // over the logits rows
  std::vector<kernels::AttnSeq> attn_seqs;
  std::vector<LayerActivations> layers;  // n_layers if keep_activations, else 1 (reused)
  Tensor x_last;                         // [T, dim] the residual stream; after the forward,
                                         // the residual after the last layer (kept)
  Tensor x_gather;                       // [n_sequences, dim] last rows (last_token only)
  Tensor inv_rms_final;                 // [rows_out]
  Tensor x_final;                       // [rows_out, dim] after the final norm
  Tensor logits;                        // [rows_out, vocab]
  Tensor lora_h;                        // [T, max_rank] SGMV scratch
  Tensor lora_dh;                       // [T, max_rank] backward scratch
  BackwardScratch scratch;              // the backward's buffers
};

// Gradient buffers for the LoRA slots, in the slot pool's layout (see kernels/lora.h):
// per (layer, target) dA = [max_slots, max_rank, d_in], dB = [max_slots, d_out·max_rank] with
// slot s's dB_s = [d_out, r_s] packed at its start, as B is.
// Backward passes accumulate; take() moves one slot's sums into an adapter-shaped LoraWeights
// and zeroes them. Entries beyond a slot's rank stay zero.
class LoraGrads {
 public:
  explicit LoraGrads(const LoraSlotPool& pool);
  float* dA(int64_t layer, LoraTarget target);  // null when the pool lacks the target
  float* dB(int64_t layer, LoraTarget target);
  // Expert `expert`'s block ([max_slots, ...], the pool's expert_view layout) of a sparse
  // layer's gate / up / down; null when the pool has no expert storage there.
  float* expert_dA(int64_t layer, LoraTarget target, int64_t expert);
  float* expert_dB(int64_t layer, LoraTarget target, int64_t expert);
  // Adds slot's gradients into `out` (shaped like the adapter in that slot) and zeroes them.
  void take(int32_t slot, LoraWeights& out);

 private:
  const LoraSlotPool& pool_;
  std::vector<std::array<std::pair<Tensor, Tensor>, kLoraTargetCount>> grads_;  // [layer]
  // [layer][expert_proj]: dA [n_experts, max_slots, max_rank, d_in], dB [.., d_out·max_rank]
  // (packed per slot, as B)
  std::vector<std::array<std::pair<Tensor, Tensor>, kExpertProjCount>> expert_grads_;
};

// What a backward pass reads besides the forward state, and where gradients go (either
// destination may be null). The unembedding's backward is done by the caller in row chunks
// (unembed_backward), which leaves ∂loss/∂x_final in d_hidden.
// The router's load-balancing loss (MoeAuxLoss, engine/moe_routing.h) of a keep_activations
// forward. Empty (value 0, no grads) unless the model's config asks for it (MoeConfig::router_aux_loss).
MoeAuxLoss moe_aux_loss(const ModelConfig& config, const ForwardState& state);

struct BackwardOptions {
  const Tensor* d_hidden = nullptr;  // [T, dim] ∂loss/∂x_final
  LoraGrads* lora_grads = nullptr;  // LoRA A/B gradients (accumulated)
  ModelWeights* base_grads = nullptr;  // full-parameter mode: every base weight (accumulated)
  const MoeAuxLoss* moe_aux = nullptr;  // the router's aux loss, differentiated too (or null)
};

class Model {
 public:
  // `weights` must outlive the Model; it is never modified.
  explicit Model(const ModelWeights& weights);

  const ModelConfig& config() const { return weights_.config; }
  const ModelWeights& weights() const { return weights_; }
  // [head_dim/2] RoPE inverse frequencies (rope_inv_freq of the config).
  const std::vector<float>& inv_freq() const { return inv_freq_; }

  // Runs the batch, appending each sequence's new K/V to `cache`, and leaves logits in
  // state.logits: [n_sequences, vocab] (last_token) or [T, vocab] (all_tokens, rows in batch
  // order). `lora` may be null when every slot is −1. Validates the batch (token ids < vocab,
  // slots in range and occupied, context <= max_seq_len, KV blocks available) before
  // touching the cache; on error nothing is appended.
  void forward(std::span<const BatchSequence> batch, KvCache& cache, const LoraSlotPool* lora,
               ForwardState& state, const ForwardOptions& options = {}) const;

  // Backward of the last forward, which must have used keep_activations and all-token rows
  // (all_tokens or hidden_only) over sequences that started at position 0 (training batches),
  // from options.d_hidden through every layer to the embedding. Gradients
  // for the LoRA slots of the batch's rows go to options.lora_grads; with options.base_grads,
  // gradients for every base weight too (full-parameter mode). The base is never modified.
  // Rows [r0, r1) of an all-token forward's final hidden states through the unembedding
  // (+ lm_head LoRA): logits = [r1 − r0, vocab]. Reads state.x_final and state.segments.
  void unembed(ForwardState& state, const LoraSlotPool* lora, int64_t r0, int64_t r1,
               Tensor& logits) const;
  // Backward of unembed for rows [r0, r1): d_hidden rows r0..r1 = dlogits·U (+ LoRA part),
  // accumulating lm_head LoRA gradients and, in full-parameter mode, the unembedding's.
  void unembed_backward(ForwardState& state, const LoraSlotPool* lora,
                        const BackwardOptions& options, int64_t r0, int64_t r1,
                        const Tensor& dlogits, Tensor& d_hidden) const;

  // `state` is also scratch space (SGMV buffers); its activations are not modified.
  void backward(ForwardState& state, const LoraSlotPool* lora,
                const BackwardOptions& options) const;

 private:
  void validate(std::span<const BatchSequence> batch, const KvCache& cache,
                const LoraSlotPool* lora) const;
  const ModelWeights& weights_;
  std::vector<float> inv_freq_;  // [head_dim/2], with rope_scaling applied
};

// RoPE inverse frequencies for a config: theta^(−2i/rope_dim), computed in float like
// llama2.c and HF, with Llama 3 or YaRN rope_scaling applied when configured.
std::vector<float> rope_inv_freq(const ModelConfig& config);
// YaRN's attention factor, which multiplies cos and sin (the rotated q and k); 1 otherwise.
float rope_attention_factor(const ModelConfig& config);
// The attention softmax scale: 1/√head_dim times rope_attention_factor² (YaRN's factor on the
// rotated q and k, folded into the scores); for MLA, whose scores are only partly rotated,
// 1/√qk_head_dim times yarn_mscale(factor, mscale_all_dim)² under YaRN with mscale_all_dim (HF
// DeepseekV3Attention), the factor itself applied on the rope columns (mla_rope).
float attention_softmax_scale(const ModelConfig& config);

}  // namespace spindle::engine
