#pragma once
// Shared by the durability test and its child: the catalog layout the child writes and the
// adapter each seed yields, so the parent can check every acknowledged revision bit for bit.

#include <string>

#include "spindle/catalog/catalog.h"
#include "spindle/engine/lora.h"

namespace spindle::catalog::durability {

inline constexpr const char* kTenant = "durable";
inline constexpr const char* kPolicy = "loop";
inline constexpr const char* kBase = "tiny";

inline engine::ModelConfig loop_config() {
  engine::ModelConfig c;
  c.arch = engine::Arch::qwen3;
  c.dim = 48;
  c.hidden_dim = 80;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 12;
  c.vocab_size = 97;
  c.max_seq_len = 64;
  return c;
}

// Seeds that are multiples of 5 all give the seed-0 adapter: identical content, stored once.
inline engine::LoraWeights loop_adapter(uint64_t seed) {
  const engine::LoraTarget targets[] = {engine::LoraTarget::q, engine::LoraTarget::v,
                                        engine::LoraTarget::down};
  return engine::LoraWeights::random(loop_config(), 8, 16.0f, targets, seed % 5 == 0 ? 0 : seed,
                                     0.1f, 0.1f);
}

inline PolicySpec loop_spec() {
  PolicySpec s;
  s.name = kPolicy;
  s.base_id = kBase;
  s.lora = {.rank = 8,
            .alpha = 16.0f,
            .targets = {engine::LoraTarget::q, engine::LoraTarget::v, engine::LoraTarget::down},
            .use_rslora = false};
  s.description = "committed in a loop and killed at random";
  return s;
}

}  // namespace spindle::catalog::durability
