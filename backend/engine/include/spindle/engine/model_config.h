#pragma once
// Architecture hyper-parameters of a Llama-family decoder (Llama, Qwen3 dense, Qwen3-MoE).
// Loaders fill this from HF config.json or a llama2.c header; the model and the slot pool size
// from it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spindle/kernels/rope.h"

namespace spindle::engine {

enum class Arch : uint8_t {
  llama,      // RMSNorm, RoPE, GQA, SwiGLU
  qwen3,      // llama + per-head RMSNorm on q and k before RoPE
  qwen3_moe,  // qwen3 with routed experts in place of the MLP on the sparse layers (MoeConfig)
};

const char* arch_name(Arch arch);

// Llama 3 style RoPE frequency scaling (config.json "rope_scaling": {"rope_type": "llama3"}).
struct RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position = 8192;
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
  // off by default, as in transformers).
  bool router_aux_loss = false;
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
  MoeConfig moe;     // n_experts > 0 only for Arch::qwen3_moe
  std::string name;  // informational (e.g. path or HF name_or_path)

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // Per-head RMSNorm on q and k (Qwen3 and Qwen3-MoE).
  bool qk_norm() const { return arch == Arch::qwen3 || arch == Arch::qwen3_moe; }
  // Layer `layer`'s MLP is routed experts (HF: not in mlp_only_layers and (layer + 1) a
  // multiple of decoder_sparse_step).
  bool sparse_layer(int64_t layer) const;

  // Throws spindle::Error(invalid_argument) naming the first inconsistent field
  // (non-positive sizes, n_heads % n_kv_heads != 0, odd head_dim, ...). `source` names the file.
  void validate(const std::string& source) const;
};

}  // namespace spindle::engine
