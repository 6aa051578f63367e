#pragma once
// When the CPU kernels fork OpenMP threads. A parallel region costs microseconds to start and
// its workers spin afterwards, competing with OpenBLAS's own threads on small machines, so a
// kernel goes parallel only when one call holds at least kParallelMinWork multiply-adds (or
// element operations). Code inside a region must not throw: kernels check contracts before.

#include <cstdint>

namespace spindle::kernels::cpu {

inline constexpr int64_t kParallelMinWork = int64_t{1} << 18;

inline bool worth_parallel(int64_t work) {
  return work >= kParallelMinWork;
}

}  // namespace spindle::kernels::cpu
