#pragma once
// The one place the SGMV segment/slot contract of lora.h is validated on the host, and the
// split of a call's adapted rows into short segments (run row by row: the CPU's simd primitives,
// the CUDA row kernels) and tall ones (one GEMM each: OpenBLAS on the CPU, cuBLAS on CUDA).
// Host code; the CPU kernels (cpu/lora*.cpp) and the CUDA LoRA backward (cuda/lora_backward.cu,
// through host mirrors of the slot tables) both plan with it.

#include <cstdint>
#include <span>
#include <vector>

#include "spindle/kernels/lora.h"

namespace spindle::kernels {

// A segment with at least this many rows runs as one GEMM (the weights are read once for all
// its rows); shorter ones run row by row, parallel across rows, since a decode batch of
// distinct adapters is all one-row segments.
inline constexpr int64_t kLoraGemmMinRows = 16;

// Which weights a pass reads: shrink passes need slots.A; expand passes slots.B and slots.scale.
enum class LoraPass : uint8_t { shrink, expand };

struct LoraRowJob {
  int64_t row;
  int32_t slot;
  int32_t rank;
};

struct LoraSegmentJob {
  int64_t row_begin;
  int64_t n_rows;
  int32_t slot;
  int32_t rank;
};

// The adapted work of one call, after every contract check: nothing runs unless all pass.
// Base-only segments, rank-0 slots and empty segments are dropped. Both lists are in row order.
struct LoraPlan {
  std::vector<LoraRowJob> rows;          // rows of short segments
  std::vector<LoraSegmentJob> segments;  // tall segments (>= kLoraGemmMinRows rows)
  int64_t row_work = 0;                  // Σ rank · (d_in for shrink, d_out for expand) of `rows`

  bool empty() const { return rows.empty() && segments.empty(); }
};

// Validates slots and segments (throws std::invalid_argument naming `kernel`) and plans them.
// Reads slots.rank (and nothing else through a pointer: A, B and scale are only checked
// non-null for the pass), so a CUDA caller passes host mirrors of the rank table.
LoraPlan plan_lora(const LoraSlots& slots, std::span<const LoraSegment> segments, LoraPass pass,
                   const char* kernel);

}  // namespace spindle::kernels
