#pragma once
// The base model resident in device memory, uploaded once from an engine::ModelWeights.
// Projections and the embedding table are in the chosen Precision (bf16 by default, fp32 for
// exactness checks); norm weights and the RoPE inverse frequencies (engine::rope_inv_freq, with
// rope_scaling applied) are fp32 in both modes. A tied unembedding is the embedding table,
// uploaded once. Routed experts (Qwen3-MoE) are stacked per projection. Read-only after construction: every DeviceModel, sampler and trainer on the
// device shares it.

#include <vector>

#include "spindle/engine/weights.h"
#include "spindle/engine_cuda/device_tensor.h"

namespace spindle::engine_cuda {

struct DeviceLayerWeights {
  DeviceTensor attn_norm;  // [1, dim] fp32
  DeviceTensor wq;         // [q_dim, dim]
  DeviceTensor wk;         // [kv_dim, dim]
  DeviceTensor wv;         // [kv_dim, dim]
  DeviceTensor wo;         // [dim, q_dim]
  DeviceTensor q_norm;     // [1, head_dim] fp32, Qwen3 only (empty otherwise)
  DeviceTensor k_norm;     // [1, head_dim] fp32, Qwen3 only
  DeviceTensor ffn_norm;   // [1, dim] fp32
  DeviceTensor w_gate;     // [hidden, dim]
  DeviceTensor w_up;       // [hidden, dim]
  DeviceTensor w_down;     // [dim, hidden]
  // Sparse layers (ModelConfig::sparse_layer): the router and every routed expert, stacked so
  // that expert e's projection is rows [e·d_out, (e+1)·d_out) of one tensor.
  DeviceTensor router;             // [n_experts, dim]
  std::vector<float> router_bias;  // [n_experts] host (the choice is made on the host), or empty
  DeviceTensor expert_gate;        // [n_experts·expert_dim, dim]
  DeviceTensor expert_up;          // [n_experts·expert_dim, dim]
  DeviceTensor expert_down;        // [n_experts·dim, expert_dim]
  // Multi-head Latent Attention (ModelConfig::mla_attention; wk / wv stay empty), as
  // engine::LayerWeights: Q = q_lora_rank, R = kv_lora_rank, H heads.
  DeviceTensor wq_a;       // [Q, dim] (Q > 0)
  DeviceTensor q_a_norm;   // [1, Q] fp32
  DeviceTensor wq_b;       // [H·(dn+dr), Q]
  DeviceTensor wkv_a;      // [R + dr, dim]
  DeviceTensor kv_a_norm;  // [1, R] fp32
  DeviceTensor wkv_b;      // [H·(dn+dv), R]
};

class DeviceWeights {
 public:
  // Validates `weights` (ModelWeights::validate) and uploads it; synchronous.
  DeviceWeights(const engine::ModelWeights& weights, Precision precision = Precision::bf16);
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  const engine::ModelConfig& config() const { return config_; }
  Precision precision() const { return precision_; }
  const DeviceTensor& tok_emb() const { return tok_emb_; }  // [vocab, dim]
  const DeviceLayerWeights& layer(int64_t l) const { return layers_.at(size_t(l)); }
  const DeviceTensor& final_norm() const { return final_norm_; }  // [1, dim] fp32
  // [vocab, dim]: the embedding table when config().tie_embeddings, else lm_head.
  const DeviceTensor& unembedding() const {
    return config_.tie_embeddings ? tok_emb_ : lm_head_;
  }
  const DeviceTensor& rope_inv_freq() const { return inv_freq_; }  // [1, head_dim/2] fp32
  // Device bytes held (a tied head counted once).
  size_t bytes() const;

 private:
  engine::ModelConfig config_;
  Precision precision_;
  DeviceTensor tok_emb_;
  std::vector<DeviceLayerWeights> layers_;
  DeviceTensor final_norm_;
  DeviceTensor lm_head_;  // empty when tied
  DeviceTensor inv_freq_;
};

}  // namespace spindle::engine_cuda
