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
  Tensor wq;         // [n_heads·head_dim, dim]; MLA: q_proj, only when q_lora_rank is 0
  Tensor wk;         // [n_kv_heads·head_dim, dim]
  Tensor wv;         // [n_kv_heads·head_dim, dim]
  Tensor wo;         // [dim, n_heads·head_dim]
  Tensor q_norm;     // [head_dim], Qwen3 only (empty otherwise)
  Tensor k_norm;     // [head_dim], Qwen3 only
  Tensor ffn_norm;   // [dim]
  // The dense SwiGLU of ModelConfig::dense_mlp_dim(layer) = F: the MLP of a dense layer, the
  // shared experts of a DeepSeek sparse layer (HF mlp.shared_experts.*), empty on a sparse
  // layer without shared experts (Qwen3-MoE).
  Tensor w_gate;  // [F, dim]
  Tensor w_up;    // [F, dim]
  Tensor w_down;  // [dim, F]
  // Sparse layers (ModelConfig::sparse_layer) hold routed experts.
  Tensor router;                       // [n_experts, dim] (HF mlp.gate.weight)
  Tensor router_bias;                  // [n_experts] e_score_correction_bias (DeepSeek)
  std::vector<ExpertWeights> experts;  // [n_experts]
  // Multi-head Latent Attention (ModelConfig::mla_attention; wk / wv stay empty). H heads,
  // R = kv_lora_rank, Q = q_lora_rank, dn / dr / dv the nope / rope / value head dims.
  Tensor wq_a;       // [Q, dim] q_a_proj (Q > 0)
  Tensor q_a_norm;   // [Q] q_a_layernorm
  Tensor wq_b;       // [H·(dn+dr), Q] q_b_proj
  Tensor wkv_a;      // [R + dr, dim] kv_a_proj_with_mqa: the latent, then the shared rope key
  Tensor kv_a_norm;  // [R] kv_a_layernorm
  Tensor wkv_b;      // [H·(dn+dv), R] kv_b_proj: per head dn key rows, then dv value rows
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

// Visits every tensor of the config's layout (weights.config) with its Hugging Face name and
// expected shape: fn(name, tensor, shape). weights.layers must hold n_layers entries; a sparse
// layer's experts are those in L.experts (the loader sizes them first). The one list of what a
// checkpoint holds: the loader fills it, validate checks it, the writer saves it.
template <class W, class F>
void for_each_hf_tensor_shape(W& weights, F&& fn) {
  const ModelConfig& c = weights.config;
  fn(std::string("model.embed_tokens.weight"), weights.tok_emb, Shape{c.vocab_size, c.dim});
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    auto& L = weights.layers[i];
    const int64_t l = int64_t(i);
    const std::string p = "model.layers." + std::to_string(i) + ".";
    fn(p + "input_layernorm.weight", L.attn_norm, Shape{c.dim});
    if (c.mla_attention()) {
      const MlaConfig& a = c.mla;
      if (a.q_lora_rank > 0) {
        fn(p + "self_attn.q_a_proj.weight", L.wq_a, Shape{a.q_lora_rank, c.dim});
        fn(p + "self_attn.q_a_layernorm.weight", L.q_a_norm, Shape{a.q_lora_rank});
        fn(p + "self_attn.q_b_proj.weight", L.wq_b, Shape{c.q_dim(), a.q_lora_rank});
      } else {
        fn(p + "self_attn.q_proj.weight", L.wq, Shape{c.q_dim(), c.dim});
      }
      fn(p + "self_attn.kv_a_proj_with_mqa.weight", L.wkv_a,
         Shape{a.kv_lora_rank + a.qk_rope_head_dim, c.dim});
      fn(p + "self_attn.kv_a_layernorm.weight", L.kv_a_norm, Shape{a.kv_lora_rank});
      fn(p + "self_attn.kv_b_proj.weight", L.wkv_b,
         Shape{c.n_heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank});
    } else {
      fn(p + "self_attn.q_proj.weight", L.wq, Shape{c.q_dim(), c.dim});
      fn(p + "self_attn.k_proj.weight", L.wk, Shape{c.kv_dim(), c.dim});
      fn(p + "self_attn.v_proj.weight", L.wv, Shape{c.kv_dim(), c.dim});
    }
    fn(p + "self_attn.o_proj.weight", L.wo, Shape{c.dim, c.attn_out_dim()});
    if (c.qk_norm()) {
      fn(p + "self_attn.q_norm.weight", L.q_norm, Shape{c.head_dim});
      fn(p + "self_attn.k_norm.weight", L.k_norm, Shape{c.head_dim});
    }
    fn(p + "post_attention_layernorm.weight", L.ffn_norm, Shape{c.dim});
    const int64_t Fd = c.dense_mlp_dim(l);
    std::string mlp = p + "mlp.";
    if (c.sparse_layer(l)) {
      const int64_t E = c.moe.n_experts, ed = c.moe.expert_dim;
      fn(p + "mlp.gate.weight", L.router, Shape{E, c.dim});
      if (c.moe.correction_bias)
        fn(p + "mlp.gate.e_score_correction_bias", L.router_bias, Shape{E});
      for (size_t e = 0; e < L.experts.size(); ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        fn(x + "gate_proj.weight", L.experts[e].w_gate, Shape{ed, c.dim});
        fn(x + "up_proj.weight", L.experts[e].w_up, Shape{ed, c.dim});
        fn(x + "down_proj.weight", L.experts[e].w_down, Shape{c.dim, ed});
      }
      if (Fd == 0) continue;
      mlp = p + "mlp.shared_experts.";
    }
    fn(mlp + "gate_proj.weight", L.w_gate, Shape{Fd, c.dim});
    fn(mlp + "up_proj.weight", L.w_up, Shape{Fd, c.dim});
    fn(mlp + "down_proj.weight", L.w_down, Shape{c.dim, Fd});
  }
  fn(std::string("model.norm.weight"), weights.final_norm, Shape{c.dim});
  if (!c.tie_embeddings)
    fn(std::string("lm_head.weight"), weights.lm_head, Shape{c.vocab_size, c.dim});
}

// Visits every tensor with its Hugging Face name ("model.layers.3.self_attn.q_proj.weight"),
// in the layout of for_each_hf_tensor_shape.
template <class W, class F>
void for_each_hf_tensor(W& weights, F&& fn) {
  for_each_hf_tensor_shape(weights,
                           [&](const std::string& name, auto& t, const Shape&) { fn(name, t); });
}

}  // namespace spindle::engine
