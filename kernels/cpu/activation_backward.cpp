#include <algorithm>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/activation.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {

// σ = 1/(1 + e^-g) with e^-g from the simd exp (the forward's exp), then
// d_up = d_out·(g·σ) (the forward's silu, same order) and d_gate = d_out·up·σ·(1 + g·(1 − σ)).
// Large |g| stays finite: g → −∞ gives e^-g = inf, σ = 0, both gradients ±0; g → +∞ gives σ = 1.
void swiglu_backward(const float* gate, const float* up, const float* d_out, float* d_gate,
                     float* d_up, int64_t count) {
  constexpr const char* kKernel = "swiglu_backward";
  SPINDLE_KERNEL_REQUIRE(count >= 0, kKernel, "count >= 0");
  if (count == 0) return;
  SPINDLE_KERNEL_REQUIRE(
      gate != nullptr && up != nullptr && d_out != nullptr && d_gate != nullptr && d_up != nullptr,
      kKernel, "gate, up, d_out, d_gate and d_up must be non-null");
  const simd::Ops& ops = simd::ops();
  // Chunks are a multiple of every vector width; e^-g of a piece lives on the job's stack.
  constexpr int64_t kChunk = 4096;
  constexpr int64_t kPiece = 512;
  const int64_t n_chunks = (count + kChunk - 1) / kChunk;
  cpu::parallel_for(
      n_chunks, cpu::worth_parallel(count * 16), cpu::Schedule::static_, [&](int64_t c) {
        float e[kPiece];
        const int64_t chunk_end = std::min(count, (c + 1) * kChunk);
        for (int64_t p = c * kChunk; p < chunk_end; p += kPiece) {
          const int64_t m = std::min(kPiece, chunk_end - p);
          const float* g = gate + p;
          for (int64_t i = 0; i < m; ++i) e[i] = -g[i];
          ops.exp_sum(e, 0.0f, e, m);
          for (int64_t i = 0; i < m; ++i) {
            const float sig = 1.0f / (1.0f + e[i]);
            const float gi = g[i];
            d_up[p + i] = d_out[p + i] * (gi * sig);
            d_gate[p + i] = d_out[p + i] * up[p + i] * (sig * (1.0f + gi * (1.0f - sig)));
          }
        }
      });
}

}  // namespace spindle::kernels
