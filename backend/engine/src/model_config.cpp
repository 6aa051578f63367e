#include "spindle/engine/model_config.h"

#include "spindle/core/error.h"

namespace spindle::engine {

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::llama: return "llama";
    case Arch::qwen3: return "qwen3";
    case Arch::qwen3_moe: return "qwen3_moe";
  }
  return "?";
}

bool ModelConfig::sparse_layer(int64_t layer) const {
  if (moe.n_experts <= 0) return false;
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
  if (arch == Arch::qwen3_moe) {
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
    SPINDLE_CHECK(moe.n_experts == 0, invalid_argument,
                  "{}: {} has no experts, but num_experts is {}", source, arch_name(arch),
                  moe.n_experts);
  }
  SPINDLE_CHECK(bos_id < vocab_size && eos_id < vocab_size, invalid_argument,
                "{}: bos ({}) / eos ({}) token id outside vocab of {}", source, bos_id, eos_id,
                vocab_size);
}

}  // namespace spindle::engine
