#include "spindle/engine/model_config.h"

#include <cmath>

#include "spindle/core/error.h"

namespace spindle::engine {

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::llama: return "llama";
    case Arch::qwen3: return "qwen3";
    case Arch::qwen3_moe: return "qwen3_moe";
    case Arch::deepseek_v3:
      return "deepseek_v3";
  }
  return "?";
}

float yarn_mscale(float scale, float m) {
  return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f;
}

bool ModelConfig::sparse_layer(int64_t layer) const {
  if (moe.n_experts <= 0 || layer < moe.first_dense) return false;
  for (int64_t d : moe.dense_layers) {
    if (d == layer) return false;
  }
  return (layer + 1) % moe.sparse_step == 0;
}

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* field) {
    SPINDLE_CHECK(v > 0, invalid_argument, "{}: {} must be positive, got {}", source, field, v);
  };
  positive(dim, "hidden size (dim)");
  positive(hidden_dim, "intermediate size (hidden_dim)");
  positive(n_layers, "n_layers");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(head_dim, "head_dim");
  positive(vocab_size, "vocab_size");
  positive(max_seq_len, "max_seq_len");
  if (arch == Arch::deepseek_v3) validate_deepseek(source);  // first: it names the MLA dims
  SPINDLE_CHECK(n_heads % n_kv_heads == 0, invalid_argument,
                "{}: n_heads ({}) must be a multiple of n_kv_heads ({})", source, n_heads,
                n_kv_heads);
  SPINDLE_CHECK(head_dim % 2 == 0, invalid_argument, "{}: head_dim must be even for RoPE, got {}",
                source, head_dim);
  SPINDLE_CHECK(dim <= (1 << 16) && hidden_dim <= (1 << 18) && n_layers <= 1024 &&
                    n_heads <= 1024 && head_dim <= 1024 && vocab_size <= (1 << 22),
                invalid_argument,
                "{}: implausible model size (dim {}, hidden {}, layers {}, heads {}, head_dim {}, "
                "vocab {})",
                source, dim, hidden_dim, n_layers, n_heads, head_dim, vocab_size);
  SPINDLE_CHECK(rope_theta > 0, invalid_argument, "{}: rope_theta must be positive, got {}",
                source, rope_theta);
  SPINDLE_CHECK(rms_eps > 0, invalid_argument, "{}: rms_norm_eps must be positive, got {}", source,
                rms_eps);
  if (arch == Arch::qwen3_moe || arch == Arch::deepseek_v3) {
    SPINDLE_CHECK(moe.n_experts > 0 && moe.n_experts <= 1024, invalid_argument,
                  "{}: num_experts must be in [1, 1024], got {}", source, moe.n_experts);
    SPINDLE_CHECK(moe.top_k > 0 && moe.top_k <= moe.n_experts, invalid_argument,
                  "{}: num_experts_per_tok must be in [1, num_experts = {}], got {}", source,
                  moe.n_experts, moe.top_k);
    SPINDLE_CHECK(moe.expert_dim > 0 && moe.expert_dim <= (1 << 18), invalid_argument,
                  "{}: moe_intermediate_size must be in [1, 262144], got {}", source,
                  moe.expert_dim);
    SPINDLE_CHECK(moe.sparse_step > 0, invalid_argument,
                  "{}: decoder_sparse_step must be positive, got {}", source, moe.sparse_step);
    for (int64_t d : moe.dense_layers) {
      SPINDLE_CHECK(d >= 0 && d < n_layers, invalid_argument,
                    "{}: mlp_only_layers names layer {}, outside [0, {})", source, d, n_layers);
    }
  } else {
    SPINDLE_CHECK(!mla_attention(), invalid_argument,
                  "{}: {} has no latent attention, but kv_lora_rank is {}", source, arch_name(arch),
                  mla.kv_lora_rank);
    SPINDLE_CHECK(moe.n_experts == 0, invalid_argument,
                  "{}: {} has no experts, but num_experts is {}", source, arch_name(arch),
                  moe.n_experts);
  }
  SPINDLE_CHECK(bos_id < vocab_size && eos_id < vocab_size, invalid_argument,
                "{}: bos ({}) / eos ({}) token id outside vocab of {}", source, bos_id, eos_id,
                vocab_size);
}

void ModelConfig::validate_deepseek(const std::string& source) const {
  const MlaConfig& a = mla;
  SPINDLE_CHECK(
      a.kv_lora_rank > 0 && a.kv_lora_rank <= 8192 && a.q_lora_rank >= 0 && a.q_lora_rank <= 65536,
      invalid_argument,
      "{}: kv_lora_rank must be in [1, 8192] and q_lora_rank in [0, 65536], got {} / {}", source,
      a.kv_lora_rank, a.q_lora_rank);
  SPINDLE_CHECK(a.qk_nope_head_dim > 0 && a.qk_rope_head_dim > 0 && a.qk_rope_head_dim % 2 == 0 &&
                    a.v_head_dim > 0,
                invalid_argument,
                "{}: qk_nope_head_dim, v_head_dim must be positive and qk_rope_head_dim positive "
                "and even, got {} / {} / {}",
                source, a.qk_nope_head_dim, a.v_head_dim, a.qk_rope_head_dim);
  SPINDLE_CHECK(head_dim == a.qk_head_dim() && n_kv_heads == n_heads, invalid_argument,
                "{}: MLA needs head_dim = qk_nope_head_dim + qk_rope_head_dim ({}) and "
                "n_kv_heads = n_heads ({}), got {} / {}",
                source, a.qk_head_dim(), n_heads, head_dim, n_kv_heads);
  if (moe.n_experts > 0) {
    SPINDLE_CHECK(
        moe.n_group >= 1 && moe.n_experts % moe.n_group == 0 && moe.n_experts / moe.n_group >= 2,
        invalid_argument,
        "{}: n_group ({}) must divide n_routed_experts ({}) into groups of 2 or more", source,
        moe.n_group, moe.n_experts);
    SPINDLE_CHECK(moe.topk_group >= 1 && moe.topk_group <= moe.n_group, invalid_argument,
                  "{}: topk_group must be in [1, n_group = {}], got {}", source, moe.n_group,
                  moe.topk_group);
    SPINDLE_CHECK(moe.top_k <= moe.topk_group * (moe.n_experts / moe.n_group), invalid_argument,
                  "{}: num_experts_per_tok ({}) exceeds the experts of topk_group groups ({})",
                  source, moe.top_k, moe.topk_group * (moe.n_experts / moe.n_group));
    SPINDLE_CHECK(moe.n_shared_experts >= 0 && moe.first_dense >= 0 &&
                      std::isfinite(moe.routed_scaling) && moe.routed_scaling > 0,
                  invalid_argument,
                  "{}: n_shared_experts and first_k_dense_replace must be >= 0 and "
                  "routed_scaling_factor positive, got {} / {} / {}",
                  source, moe.n_shared_experts, moe.first_dense, moe.routed_scaling);
  }
}

}  // namespace spindle::engine
