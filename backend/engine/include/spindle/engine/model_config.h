#pragma once
// Architecture hyper-parameters of a Llama-family decoder (Llama, Qwen3 dense, Qwen3-MoE) and of
// the DeepSeek-V3 family (Multi-head Latent Attention, DeepSeek MoE; Kimi-K2 has the same shape).
// Loaders fill this from HF config.json or a llama2.c header; the model and the slot pool size
// from it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spindle/kernels/rope.h"

namespace spindle::engine {

enum class Arch : uint8_t {
  llama,        // RMSNorm, RoPE, GQA, SwiGLU
  qwen3,        // llama + per-head RMSNorm on q and k before RoPE
  qwen3_moe,    // qwen3 with routed experts in place of the MLP on the sparse layers (MoeConfig)
  deepseek_v3,  // MLA attention (MlaConfig), DeepSeek MoE (sigmoid router with correction bias,
                // group-limited top-k, shared experts, dense first layers), YaRN RoPE
};

const char* arch_name(Arch arch);

// RoPE frequency scaling (config.json "rope_scaling"): Llama 3's ("rope_type": "llama3") or
// YaRN ("yarn", transformers' _compute_yarn_parameters; DeepSeek-V3 / Kimi-K2).
enum class RopeScalingType : uint8_t { llama3, yarn };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::llama3;
  float factor = 8.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int64_t original_max_position = 8192;
  // YaRN: the correction range's rotations, and the attention scaling (mscale / mscale_all_dim;
  // 0 = absent). attention_factor multiplies the rotated q/k (cos and sin); DeepSeek's attention
  // multiplies its softmax scale by yarn_mscale(factor, mscale_all_dim)² too.
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 0.0f;
  float mscale_all_dim = 0.0f;
  std::optional<float> attention_factor;  // explicit "attention_factor", else derived
  bool truncate = true;                   // floor/ceil the correction range
};
// YaRN's magnitude correction: 1 for scale <= 1, else 0.1·m·ln(scale) + 1.
float yarn_mscale(float scale, float m = 1.0f);

// Multi-head Latent Attention (DeepSeek-V2/V3, HF DeepseekV3Attention). Queries go through a
// low-rank latent (q_a_proj, RMSNorm, q_b_proj; q_proj directly when q_lora_rank is 0); keys
// and values are one shared latent per token (kv_a_proj_with_mqa → kv_lora_rank, RMSNorm)
// expanded per head by kv_b_proj into a no-RoPE key part and the value, plus one RoPE key part
// shared by every head. The KV cache holds the latent and the rotated shared key only.
struct MlaConfig {
  int64_t q_lora_rank = 0;   // 0 = no query latent (q_proj)
  int64_t kv_lora_rank = 0;  // > 0 for every MLA model
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = true;  // rope_interleave: RoPE on pairs (2i, 2i+1) of the rope part

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// How routed experts' scores are computed.
enum class RouterScoring : uint8_t {
  softmax,  // Qwen3-MoE: softmax over the router logits
  sigmoid,  // DeepSeek-V3: sigmoid, top-k chosen on sigmoid + e_score_correction_bias within
            // the topk_group best of n_group expert groups (a group scores the sum of its two
            // best), weights the plain sigmoid scores
};

// Routed experts (Qwen3-MoE, HF Qwen3MoeSparseMoeBlock): a softmax router over n_experts picks
// top_k experts per token; their SwiGLU outputs (intermediate size expert_dim) are summed with
// the router's probabilities as weights (renormalised over the top k when norm_topk).
struct MoeConfig {
  int64_t n_experts = 0;              // num_experts; 0 = a dense model
  int64_t top_k = 0;                  // num_experts_per_tok
  int64_t expert_dim = 0;             // moe_intermediate_size
  int64_t sparse_step = 1;            // decoder_sparse_step: every n-th layer is sparse
  std::vector<int64_t> dense_layers;  // mlp_only_layers: layers that keep the dense MLP
  bool norm_topk = false;             // norm_topk_prob
  float aux_loss_coef = 0.0f;         // router_aux_loss_coef
  // output_router_logits: training adds aux_loss_coef × the load-balancing loss (HF's switch;
  // off by default, as in transformers). Qwen3-MoE only.
  bool router_aux_loss = false;
  // DeepSeek MoE (Arch::deepseek_v3).
  RouterScoring scoring = RouterScoring::softmax;
  int64_t n_group = 1;           // n_group: experts in n_group equal groups
  int64_t topk_group = 1;        // topk_group: groups a token may choose from
  float routed_scaling = 1.0f;   // routed_scaling_factor: multiplies the combine weights
  int64_t n_shared_experts = 0;  // n_shared_experts: one SwiGLU of n_shared·expert_dim on
                                 // every sparse layer, added to the routed output
  int64_t first_dense = 0;       // first_k_dense_replace: layers [0, first_dense) stay dense
  bool correction_bias = false;  // the router has e_score_correction_bias (topk_method noaux_tc)
  int64_t shared_dim() const { return n_shared_experts * expert_dim; }
};

struct ModelConfig {
  Arch arch = Arch::llama;
  int64_t dim = 0;          // hidden size
  int64_t hidden_dim = 0;   // MLP intermediate size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;     // usually dim / n_heads; Qwen3 sets it explicitly
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  float rope_theta = 10000.0f;
  std::optional<RopeScaling> rope_scaling;
  float rms_eps = 1e-5f;
  bool tie_embeddings = true;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  MoeConfig moe;     // n_experts > 0 only for Arch::qwen3_moe and Arch::deepseek_v3
  MlaConfig mla;     // kv_lora_rank > 0 only for Arch::deepseek_v3
  // num_nextn_predict_layers (DeepSeek-V3's multi-token-prediction modules): checkpoints hold
  // them as layers n_layers .. n_layers + mtp_layers − 1; the loader skips those tensors, as
  // transformers does (they are not part of the causal LM).
  int64_t mtp_layers = 0;
  std::string name;  // informational (e.g. path or HF name_or_path)

  // For MLA, head_dim is the query/key head (qk_nope + qk_rope) and n_kv_heads == n_heads.
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  bool mla_attention() const { return mla.kv_lora_rank > 0; }
  // Width of the attention output that o_proj reads: n_heads·v_head_dim for MLA, else q_dim.
  int64_t attn_out_dim() const { return mla_attention() ? n_heads * mla.v_head_dim : q_dim(); }
  // The dims RoPE rotates per head: qk_rope_head_dim for MLA, else head_dim.
  int64_t rope_dim() const { return mla_attention() ? mla.qk_rope_head_dim : head_dim; }
  // The KV cache per layer and token: kv heads × width for K and for V; MLA caches one latent
  // row (kv_lora_rank + qk_rope_head_dim) read as both.
  int64_t kv_cache_heads() const { return mla_attention() ? 1 : n_kv_heads; }
  int64_t kv_cache_head_dim() const {
    return mla_attention() ? mla.kv_lora_rank + mla.qk_rope_head_dim : head_dim;
  }
  // Bytes the KV cache holds per token over every layer at `elem_bytes` per element.
  int64_t kv_bytes_per_token(int64_t elem_bytes) const {
    return n_layers * kv_cache_heads() * kv_cache_head_dim() * elem_bytes *
           (mla_attention() ? 1 : 2);
  }
  // The MLP intermediate size of a layer's dense SwiGLU: hidden_dim on a dense layer, the
  // shared experts' n_shared·expert_dim on a sparse one (0 when it has none).
  int64_t dense_mlp_dim(int64_t layer) const {
    return sparse_layer(layer) ? moe.shared_dim() : hidden_dim;
  }
  // Per-head RMSNorm on q and k (Qwen3 and Qwen3-MoE).
  bool qk_norm() const { return arch == Arch::qwen3 || arch == Arch::qwen3_moe; }
  // Layer `layer`'s MLP is routed experts (HF Qwen3-MoE: not in mlp_only_layers and
  // (layer + 1) a multiple of decoder_sparse_step; DeepSeek: layer >= first_k_dense_replace).
  bool sparse_layer(int64_t layer) const;

  // Throws spindle::Error(invalid_argument) naming the first inconsistent field
  // (non-positive sizes, n_heads % n_kv_heads != 0, odd head_dim, ...). `source` names the file.
  void validate(const std::string& source) const;

 private:
  void validate_deepseek(const std::string& source) const;
};

// Multi-head Latent Attention's working dims, as both engines' MLA ops use them: H heads, dn /
// dr / dv the nope / rope / value head dims, R the latent rank; qw = dn + dr per query head,
// lw = R + dr per cached latent row, kvw = dn + dv rows of kv_b_proj per head, P = max(qw, dv)
// the uncompressed form's padded head.
struct MlaDims {
  int64_t H, dn, dr, dv, R, qw, lw, kvw, P;
  explicit MlaDims(const ModelConfig& c)
      : H(c.n_heads),
        dn(c.mla.qk_nope_head_dim),
        dr(c.mla.qk_rope_head_dim),
        dv(c.mla.v_head_dim),
        R(c.mla.kv_lora_rank),
        qw(dn + dr),
        lw(R + dr),
        kvw(dn + dv),
        P(dn + dr > dv ? dn + dr : dv) {}
};

}  // namespace spindle::engine
