#include "spindle/kernels/activation.h"

#include <algorithm>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {

// silu(g)·up computed as (g·(1/(1 + expf(-g))))·up, llama2.c's order of operations.
void swiglu(const float* gate, const float* up, float* out, int64_t count) {
  SPINDLE_KERNEL_REQUIRE(count >= 0, "swiglu", "count >= 0");
  if (count == 0) return;
  SPINDLE_KERNEL_REQUIRE(gate != nullptr && up != nullptr && out != nullptr, "swiglu",
                         "gate, up and out must be non-null");
  const simd::Ops& ops = simd::ops();
  // exp costs ~10 element operations; chunks are a multiple of every vector width.
  constexpr int64_t kChunk = 4096;
  const int64_t n_chunks = (count + kChunk - 1) / kChunk;
  cpu::parallel_for(n_chunks, cpu::worth_parallel(count * 10), cpu::Schedule::static_, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    ops.silu_mul(gate + begin, up + begin, out + begin, std::min(kChunk, count - begin));
  });
}

}  // namespace spindle::kernels
