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
  w.tok_emb = fill({c.vocab_size, c.dim}, -0.5f, 0.5f);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    engine::LayerWeights L;
    L.attn_norm = fill({c.dim}, 0.9f, 1.1f);
    L.wq = proj(c.q_dim(), c.dim);
    L.wk = proj(c.kv_dim(), c.dim);
    L.wv = proj(c.kv_dim(), c.dim);
    L.wo = proj(c.dim, c.q_dim());
    if (c.arch == engine::Arch::qwen3) {
      L.q_norm = fill({c.head_dim}, 0.9f, 1.1f);
      L.k_norm = fill({c.head_dim}, 0.9f, 1.1f);
    }
    L.ffn_norm = fill({c.dim}, 0.9f, 1.1f);
    L.w_gate = proj(c.hidden_dim, c.dim);
    L.w_up = proj(c.hidden_dim, c.dim);
    L.w_down = proj(c.dim, c.hidden_dim);
    w.layers.push_back(std::move(L));
  }
  w.final_norm = fill({c.dim}, 0.9f, 1.1f);
  if (!c.tie_embeddings) w.lm_head = proj(c.vocab_size, c.dim);
  w.validate(c.name);
  return w;
}

}  // namespace spindle::bench
