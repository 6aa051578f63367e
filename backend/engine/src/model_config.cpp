#include "spindle/engine/model_config.h"

#include "spindle/core/error.h"

namespace spindle::engine {

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::llama: return "llama";
    case Arch::qwen3: return "qwen3";
  }
  return "?";
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
  SPINDLE_CHECK(bos_id < vocab_size && eos_id < vocab_size, invalid_argument,
                "{}: bos ({}) / eos ({}) token id outside vocab of {}", source, bos_id, eos_id,
                vocab_size);
}

}  // namespace spindle::engine
