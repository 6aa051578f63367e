#pragma once
// When and how the CPU kernels fork OpenMP threads. A parallel region costs microseconds to
// start (team setup, a futex wake), so a kernel goes parallel only when one call holds at least
// kParallelMinWork multiply-adds (or element operations). Below that, parallel_for runs the
// loop inline without entering libgomp at all — `#pragma omp parallel if(false)` still pays
// the region's setup, which measured ~30% of a stories260K LoRA decode step.
// OpenBLAS is linked in its OpenMP build, so BLAS calls and these loops share one thread pool.
// Code inside a region must not throw: kernels check their contracts before.

#include <cstdint>

namespace spindle::kernels::cpu {

inline constexpr int64_t kParallelMinWork = int64_t{1} << 18;

inline bool worth_parallel(int64_t work) {
  return work >= kParallelMinWork;
}

enum class Schedule : uint8_t { static_, dynamic };

// Runs body(i) for i in [0, n): on the OpenMP team when `parallel`, inline otherwise.
// Schedule::dynamic hands out one index at a time (uneven jobs such as attention rows).
template <class Body>
void parallel_for(int64_t n, bool parallel, Schedule schedule, Body&& body) {
  if (!parallel || n < 2) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  if (schedule == Schedule::dynamic) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

}  // namespace spindle::kernels::cpu
