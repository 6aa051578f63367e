#include "spindle/kernels/lora_plan.h"

#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {

LoraPlan plan_lora(const LoraSlots& slots, std::span<const LoraSegment> segments, LoraPass pass,
                   const char* kernel) {
  SPINDLE_KERNEL_REQUIRE(slots.d_in > 0 && slots.d_out > 0, kernel, "d_in > 0 and d_out > 0");
  SPINDLE_KERNEL_REQUIRE(slots.max_slots >= 0 && slots.max_rank >= 0, kernel,
                         "max_slots >= 0 and max_rank >= 0");
  LoraPlan plan;
  int64_t prev_end = 0;
  for (const LoraSegment& seg : segments) {
    SPINDLE_KERNEL_REQUIRE(seg.row_begin >= 0 && seg.row_end >= seg.row_begin, kernel,
                           "segment rows must satisfy 0 <= row_begin <= row_end");
    SPINDLE_KERNEL_REQUIRE(seg.row_begin >= prev_end, kernel,
                           "segments must be in row order and must not overlap");
    prev_end = seg.row_end;
    if (seg.slot < 0 || seg.row_end == seg.row_begin) continue;
    SPINDLE_KERNEL_REQUIRE(seg.slot < slots.max_slots, kernel, "segment slot >= max_slots");
    SPINDLE_KERNEL_REQUIRE(slots.rank != nullptr, kernel, "slots.rank must be non-null");
    const int32_t rank = slots.rank[seg.slot];
    SPINDLE_KERNEL_REQUIRE(rank >= 0 && rank <= slots.max_rank, kernel,
                           "slot rank must lie in [0, max_rank]");
    if (rank == 0) continue;
    if (pass == LoraPass::shrink) {
      SPINDLE_KERNEL_REQUIRE(slots.A != nullptr, kernel, "slots.A must be non-null");
    } else {
      SPINDLE_KERNEL_REQUIRE(slots.B != nullptr && slots.scale != nullptr, kernel,
                             "slots.B and slots.scale must be non-null");
    }
    const int64_t n_rows = seg.row_end - seg.row_begin;
    if (n_rows >= kLoraGemmMinRows) {
      plan.segments.push_back({seg.row_begin, n_rows, seg.slot, rank});
      continue;
    }
    for (int64_t r = seg.row_begin; r < seg.row_end; ++r) plan.rows.push_back({r, seg.slot, rank});
    plan.row_work += n_rows * rank * (pass == LoraPass::shrink ? slots.d_in : slots.d_out);
  }
  return plan;
}

}  // namespace spindle::kernels
