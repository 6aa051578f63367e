#include "spindle/kernels/lora.h"

#include <cblas.h>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"
#include "spindle/kernels/lora_plan.h"

namespace spindle::kernels {

void lora_shrink(const float* x, int64_t ld_x, const LoraSlots& slots,
                 std::span<const LoraSegment> segments, float* h) {
  const LoraPlan plan = plan_lora(slots, segments, LoraPass::shrink, "lora_shrink");
  SPINDLE_KERNEL_REQUIRE(ld_x >= slots.d_in, "lora_shrink", "ld_x >= d_in");
  if (plan.empty()) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && h != nullptr, "lora_shrink", "x and h must be non-null");

  const int64_t d_in = slots.d_in;
  const int64_t max_rank = slots.max_rank;
  const simd::Ops& ops = simd::ops();
  const auto n_row_jobs = static_cast<int64_t>(plan.rows.size());
  cpu::parallel_for(
      n_row_jobs, cpu::worth_parallel(plan.row_work), cpu::Schedule::dynamic, [&](int64_t i) {
        const LoraRowJob& job = plan.rows[static_cast<size_t>(i)];
        const float* A_s = slots.A + int64_t{job.slot} * max_rank * d_in;
        ops.gemv(A_s, d_in, job.rank, d_in, x + job.row * ld_x, 1.0f, 0.0f, h + job.row * max_rank);
      });
  // Outside any OpenMP region: OpenBLAS runs its own threads.
  for (const LoraSegmentJob& seg : plan.segments) {
    const float* A_s = slots.A + int64_t{seg.slot} * max_rank * d_in;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(seg.n_rows), blasint(seg.rank),
                blasint(d_in), 1.0f, x + seg.row_begin * ld_x, blasint(ld_x), A_s, blasint(d_in),
                0.0f, h + seg.row_begin * max_rank, blasint(max_rank));
  }
}

void lora_expand(const float* h, const LoraSlots& slots, std::span<const LoraSegment> segments,
                 float* y, int64_t ld_y, int64_t col_offset) {
  const LoraPlan plan = plan_lora(slots, segments, LoraPass::expand, "lora_expand");
  SPINDLE_KERNEL_REQUIRE(col_offset >= 0 && ld_y >= col_offset + slots.d_out, "lora_expand",
                         "col_offset >= 0 and ld_y >= col_offset + d_out");
  if (plan.empty()) return;
  SPINDLE_KERNEL_REQUIRE(h != nullptr && y != nullptr, "lora_expand", "h and y must be non-null");

  const int64_t d_out = slots.d_out;
  const int64_t max_rank = slots.max_rank;
  const simd::Ops& ops = simd::ops();
  const auto n_row_jobs = static_cast<int64_t>(plan.rows.size());
  cpu::parallel_for(n_row_jobs, cpu::worth_parallel(plan.row_work), cpu::Schedule::dynamic,
                    [&](int64_t i) {
                      const LoraRowJob& job = plan.rows[static_cast<size_t>(i)];
                      const float* B_s = slot_b(slots.B, slots, job.slot);
                      // y[j] += scale · dot(B_s[j, 0:r], h_row): many short rows, one hadd tree per
                      // 8 outputs.
                      ops.gemv(B_s, job.rank, d_out, job.rank, h + job.row * max_rank,
                               slots.scale[job.slot], 1.0f, y + job.row * ld_y + col_offset);
                    });
  for (const LoraSegmentJob& seg : plan.segments) {
    const float* B_s = slot_b(slots.B, slots, seg.slot);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(seg.n_rows), blasint(d_out),
                blasint(seg.rank), slots.scale[seg.slot], h + seg.row_begin * max_rank,
                blasint(max_rank), B_s, blasint(seg.rank), 1.0f,
                y + seg.row_begin * ld_y + col_offset, blasint(ld_y));
  }
}

}  // namespace spindle::kernels
