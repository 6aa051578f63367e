// Memory read bandwidth, and what a batch-1 decode step has to read from memory.
//
// A batch-1 decode multiplies one row by every weight matrix once, so its speed is bounded by
// bandwidth ÷ (bytes read per token). The probe measures bandwidth the way decode consumes it:
// streaming, read-only, vector loads, over a buffer far larger than the caches, with the thread
// count decode uses.

#include <immintrin.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "bench.h"
#include "spindle/core/error.h"

namespace spindle::bench {
namespace {

// Each function sums n floats (n a multiple of 128, p 64-byte aligned) with eight independent
// accumulators so that loads, not the add latency chain, limit the rate.
__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    a4 = _mm512_add_ps(a4, _mm512_load_ps(p + i + 64));
    a5 = _mm512_add_ps(a5, _mm512_load_ps(p + i + 80));
    a6 = _mm512_add_ps(a6, _mm512_load_ps(p + i + 96));
    a7 = _mm512_add_ps(a7, _mm512_load_ps(p + i + 112));
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it
  _mm512_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < n; i += 64) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    a4 = _mm256_add_ps(a4, _mm256_load_ps(p + i + 32));
    a5 = _mm256_add_ps(a5, _mm256_load_ps(p + i + 40));
    a6 = _mm256_add_ps(a6, _mm256_load_ps(p + i + 48));
    a7 = _mm256_add_ps(a7, _mm256_load_ps(p + i + 56));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                 _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

float sum_scalar(const float* p, size_t n) {
  float a[8] = {};
  for (size_t i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += p[i + size_t(j)];
  float total = 0;
  for (float v : a) total += v;
  return total;
}

struct FreeAligned {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

Bandwidth measure_read_bandwidth(size_t buffer_bytes, int threads, int passes) {
  constexpr size_t kBlock = 128;  // floats per loop iteration of the widest kernel
  const size_t n_floats = buffer_bytes / sizeof(float) / (kBlock * size_t(threads)) *
                          (kBlock * size_t(threads));
  const size_t per_thread = n_floats / size_t(threads);
  std::unique_ptr<float, FreeAligned> buf(
      static_cast<float*>(std::aligned_alloc(64, n_floats * sizeof(float))));
  SPINDLE_CHECK(buf != nullptr, resource, "bandwidth probe: cannot allocate {} bytes",
                n_floats * sizeof(float));
  float* data = buf.get();

  __builtin_cpu_init();
  float (*sum)(const float*, size_t) = sum_scalar;
  Bandwidth out;
  out.isa = "scalar";
  if (__builtin_cpu_supports("avx512f")) {
    sum = sum_avx512;
    out.isa = "avx512";
  } else if (__builtin_cpu_supports("avx2")) {
    sum = sum_avx2;
    out.isa = "avx2";
  }

  // First touch by the thread that later reads each share (pages local to it on NUMA hosts).
#pragma omp parallel num_threads(threads)
  {
    const size_t t = size_t(omp_get_thread_num());
    float* p = data + t * per_thread;
    for (size_t i = 0; i < per_thread; ++i) p[i] = 1.0f / float(1 + (i & 1023));
  }

  double best = 0;
  volatile float sink = 0;
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 is untimed warm-up
    float total = 0;
    const Clock::time_point start = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const size_t t = size_t(omp_get_thread_num());
      total += sum(data + t * per_thread, per_thread);
    }
    const double s = seconds_since(start);
    sink = sink + total;
    if (pass > 0) best = std::max(best, double(n_floats * sizeof(float)) / s);
  }
  out.bytes_per_s = best;
  out.threads = threads;
  out.buffer_bytes = n_floats * sizeof(float);
  out.passes = passes;
  return out;
}

double decode_bytes_per_token(const engine::ModelWeights& w, double context) {
  const engine::ModelConfig& c = w.config;
  // Every tensor but the embedding (one row is read) and the routed experts (top_k of them
  // per sparse layer): the active parameters.
  double bytes = double(c.dim) * sizeof(float);
  engine::for_each_hf_tensor(w, [&](const std::string& name, const Tensor& t) {
    if (name == "model.embed_tokens.weight" || name.find(".mlp.experts.") != std::string::npos) {
      return;
    }
    bytes += double(t.bytes());
  });
  if (c.tie_embeddings) bytes += double(w.tok_emb.bytes());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (c.sparse_layer(l)) {
      bytes += double(c.moe.top_k) * 3.0 * double(c.dim * c.moe.expert_dim) * sizeof(float);
    }
  }
  // Attention reads the cache of every cached token, every layer (K and V, or MLA's latent).
  bytes += context * double(c.kv_bytes_per_token(sizeof(float)));
  return bytes;
}

}  // namespace spindle::bench
