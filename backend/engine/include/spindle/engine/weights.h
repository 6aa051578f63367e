#pragma once
// The base model's weights, resident in memory the process owns, fp32 on the CPU.
// Internal layout is Hugging Face's: row-major [out, in] projections, RoPE "half" convention
// (llama2.c checkpoints have their q/k rows permuted on load). Read-only once loaded; shared by
// every policy, sampler and trainer. Adapters never modify it.

#include <string>
#include <vector>

#include "spindle/core/tensor.h"
#include "spindle/engine/model_config.h"

namespace spindle::engine {

// One routed expert's SwiGLU MLP (HF mlp.experts.{e}.*), intermediate size expert_dim.
struct ExpertWeights {
  Tensor w_gate;  // [expert_dim, dim]
  Tensor w_up;    // [expert_dim, dim]
  Tensor w_down;  // [dim, expert_dim]
};

struct LayerWeights {
  Tensor attn_norm;  // [dim]
  Tensor wq;         // [n_heads·head_dim, dim]
  Tensor wk;         // [n_kv_heads·head_dim, dim]
  Tensor wv;         // [n_kv_heads·head_dim, dim]
  Tensor wo;         // [dim, n_heads·head_dim]
  Tensor q_norm;     // [head_dim], Qwen3 only (empty otherwise)
  Tensor k_norm;     // [head_dim], Qwen3 only
  Tensor ffn_norm;   // [dim]
  Tensor w_gate;     // [hidden_dim, dim]
  Tensor w_up;       // [hidden_dim, dim]
  Tensor w_down;     // [dim, hidden_dim]
  // Sparse layers (ModelConfig::sparse_layer) of a Qwen3-MoE model hold these instead of the
  // dense w_gate / w_up / w_down, which stay empty there.
  Tensor router;                       // [n_experts, dim] (HF mlp.gate.weight)
  std::vector<ExpertWeights> experts;  // [n_experts]
};

struct ModelWeights {
  ModelConfig config;
  Tensor tok_emb;     // [vocab, dim]
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [dim]
  Tensor lm_head;     // [vocab, dim]; empty when config.tie_embeddings

  const Tensor& unembedding() const { return config.tie_embeddings ? tok_emb : lm_head; }
  size_t bytes() const;
  // Checks every tensor's shape against config; throws naming the tensor, got and expected.
  void validate(const std::string& source) const;
};

// Visits every tensor with its Hugging Face name ("model.layers.3.self_attn.q_proj.weight").
// Empty optional tensors (q_norm on llama, lm_head when tied) are skipped.
template <class W, class F>
void for_each_hf_tensor(W& weights, F&& fn) {
  fn(std::string("model.embed_tokens.weight"), weights.tok_emb);
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    auto& L = weights.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    fn(p + "input_layernorm.weight", L.attn_norm);
    fn(p + "self_attn.q_proj.weight", L.wq);
    fn(p + "self_attn.k_proj.weight", L.wk);
    fn(p + "self_attn.v_proj.weight", L.wv);
    fn(p + "self_attn.o_proj.weight", L.wo);
    if (!L.q_norm.empty()) fn(p + "self_attn.q_norm.weight", L.q_norm);
    if (!L.k_norm.empty()) fn(p + "self_attn.k_norm.weight", L.k_norm);
    fn(p + "post_attention_layernorm.weight", L.ffn_norm);
    if (L.experts.empty()) {
      fn(p + "mlp.gate_proj.weight", L.w_gate);
      fn(p + "mlp.up_proj.weight", L.w_up);
      fn(p + "mlp.down_proj.weight", L.w_down);
    } else {
      fn(p + "mlp.gate.weight", L.router);
      for (size_t e = 0; e < L.experts.size(); ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        fn(x + "gate_proj.weight", L.experts[e].w_gate);
        fn(x + "up_proj.weight", L.experts[e].w_up);
        fn(x + "down_proj.weight", L.experts[e].w_down);
      }
    }
  }
  fn(std::string("model.norm.weight"), weights.final_norm);
  if (!weights.config.tie_embeddings) fn(std::string("lm_head.weight"), weights.lm_head);
}

}  // namespace spindle::engine
