// The Qwen3-0.6B-shaped model with random weights that the engine bench builds in memory.

#include <omp.h>

#include <bit>
#include <cmath>

#include "bench.h"

namespace spindle::bench {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fills t with U(lo, hi) from xorshift64, in chunks of 1 Mi floats, each chunk seeded from
// (seed, chunk index): parallel, and independent of the thread count. About 1 ns per float.
Tensor uniform(Shape shape, float lo, float hi, uint64_t seed) {
  Tensor t(std::move(shape));
  constexpr int64_t kChunk = int64_t(1) << 20;
  const int64_t n = t.numel(), n_chunks = (n + kChunk - 1) / kChunk;
  float* data = t.data();
  const float scale = hi - lo;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n_chunks; ++c) {
    uint64_t s = splitmix64(seed ^ (uint64_t(c) * 0x632be59bd9b4e019ull)) | 1;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      // 23 random mantissa bits -> [1, 2) -> [0, 1).
      const float u = std::bit_cast<float>(uint32_t(0x3f800000u | uint32_t(s >> 41))) - 1.0f;
      data[i] = lo + scale * u;
    }
  }
  return t;
}

}  // namespace

engine::ModelConfig qwen3_0_6b_config(int64_t n_layers) {
  engine::ModelConfig c;
  c.arch = engine::Arch::qwen3;
  c.dim = 1024;
  c.hidden_dim = 3072;
  c.n_layers = n_layers;
  c.n_heads = 16;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 151936;
  c.max_seq_len = 4096;
  c.rope_theta = 1000000.0f;
  c.rms_eps = 1e-6f;
  c.tie_embeddings = true;
  c.bos_id = 151643;
  c.eos_id = 151645;
  c.name = "random Qwen3-0.6B shape";
  c.validate(c.name);
  return c;
}

engine::ModelConfig qwen3_30b_a3b_config(int64_t n_layers) {
  engine::ModelConfig c = qwen3_0_6b_config(n_layers);
  c.arch = engine::Arch::qwen3_moe;
  c.dim = 2048;
  c.hidden_dim = 6144;
  c.n_heads = 32;
  c.n_kv_heads = 4;
  c.tie_embeddings = false;
  c.moe.n_experts = 128;
  c.moe.top_k = 8;
  c.moe.expert_dim = 768;
  c.moe.norm_topk = true;
  c.name = "random Qwen3-30B-A3B shape";
  c.validate(c.name);
  return c;
}

engine::ModelConfig deepseek_v3_moe_config(int64_t n_layers) {
  engine::ModelConfig c = qwen3_30b_a3b_config(n_layers);
  c.arch = engine::Arch::deepseek_v3;
  c.n_heads = 16;
  c.n_kv_heads = 16;
  c.mla = {.q_lora_rank = 768,
           .kv_lora_rank = 512,
           .qk_nope_head_dim = 128,
           .qk_rope_head_dim = 64,
           .v_head_dim = 128,
           .rope_interleave = true};
  c.head_dim = c.mla.qk_head_dim();
  c.rope_theta = 10000.0f;
  engine::RopeScaling yarn;
  yarn.type = engine::RopeScalingType::yarn;
  yarn.factor = 40.0f;
  yarn.original_max_position = 4096;
  yarn.mscale = yarn.mscale_all_dim = 1.0f;
  c.rope_scaling = yarn;
  c.max_seq_len = 163840;
  engine::MoeConfig& m = c.moe;  // 128 experts of 768, top 8, from the Qwen3 shape
  m.scoring = engine::RouterScoring::sigmoid;
  m.n_group = 8;
  m.topk_group = 4;
  m.routed_scaling = 2.5f;
  m.n_shared_experts = 1;
  m.first_dense = 1;
  m.correction_bias = true;
  c.name = "random DeepSeek-V3 attention and routing at Qwen3-30B-A3B's width";
  c.validate(c.name);
  return c;
}

engine::ModelConfig qwen3_4b_config(int64_t n_layers) {
  engine::ModelConfig c = qwen3_0_6b_config(n_layers);
  c.dim = 2560;
  c.hidden_dim = 9728;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.tie_embeddings = false;
  c.name = "random Qwen3-4B shape";
  c.validate(c.name);
  return c;
}

engine::ModelWeights fast_random_weights(const engine::ModelConfig& c, uint64_t seed) {
  uint64_t next = seed;
  auto fill = [&](Shape shape, float lo, float hi) { return uniform(std::move(shape), lo, hi, ++next); };
  auto proj = [&](int64_t out, int64_t in) {
    const float a = 1.0f / std::sqrt(float(in));
    return fill({out, in}, -a, a);
  };
  engine::ModelWeights w;
  w.config = c;
  w.layers.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (c.sparse_layer(l)) w.layers[size_t(l)].experts.resize(size_t(c.moe.n_experts));
  }
  // Every tensor of the architecture: norms near 1, projections U(±1/√in), the embedding
  // U(±0.5), DeepSeek's correction bias small.
  engine::for_each_hf_tensor_shape(w, [&](const std::string& name, Tensor& t, const Shape& s) {
    if (name == "model.embed_tokens.weight") {
      t = fill(s, -0.5f, 0.5f);
    } else if (name.ends_with("e_score_correction_bias")) {
      t = fill(s, -0.01f, 0.01f);
    } else if (s.size() == 1) {
      t = fill(s, 0.9f, 1.1f);
    } else {
      t = proj(s[0], s[1]);
    }
  });
  w.validate(c.name);
  return w;
}

}  // namespace spindle::bench
