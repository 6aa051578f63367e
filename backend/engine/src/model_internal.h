#pragma once
// Helpers shared by the forward (model.cpp) and backward (backward.cpp) passes.

#include <algorithm>
#include <span>
#include <vector>

#include "spindle/core/tensor.h"
#include "spindle/kernels/lora.h"

namespace spindle::engine::internal {

// Reallocates only when the shape changes (ForwardState is reused across steps).
inline void ensure(Tensor& t, const Shape& shape) {
  if (t.shape() != shape || t.empty()) t = Tensor(shape);
}

// The parts of `segments` inside rows [r0, r1), renumbered from 0 (a row chunk's view).
inline std::vector<kernels::LoraSegment> chunk_segments(
    std::span<const kernels::LoraSegment> segments, int64_t r0, int64_t r1) {
  std::vector<kernels::LoraSegment> out;
  for (const auto& s : segments) {
    const int64_t b = std::max(s.row_begin, r0), e = std::min(s.row_end, r1);
    if (b < e) out.push_back({b - r0, e - r0, s.slot});
  }
  return out;
}

// The adapter slot of each of `rows` rows (−1 where no segment covers it).
inline std::vector<int32_t> row_slots(std::span<const kernels::LoraSegment> segments,
                                      int64_t rows) {
  std::vector<int32_t> slot(size_t(rows), -1);
  for (const auto& g : segments) {
    for (int64_t r = g.row_begin; r < g.row_end; ++r) slot[size_t(r)] = g.slot;
  }
  return slot;
}

}  // namespace spindle::engine::internal
