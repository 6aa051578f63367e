#include "spindle/kernels/lora.h"

#include <cblas.h>

#include <vector>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {
namespace {

// A segment with at least this many rows runs as one sgemm (the weights are read once for all
// its rows); shorter ones run row by row on the simd gemv, parallel across rows, since a decode
// batch of distinct adapters is all one-row segments.
constexpr int64_t kGemmMinRows = 16;

enum class LoraPass : uint8_t { shrink, expand };

struct RowJob {
  int64_t row;
  int32_t slot;
  int32_t rank;
};

struct SegmentJob {
  int64_t row_begin;
  int64_t n_rows;
  int32_t slot;
  int32_t rank;
};

// The adapted work of one call, after every contract check: nothing runs unless all pass.
struct LoraPlan {
  std::vector<RowJob> rows;          // rows of short segments
  std::vector<SegmentJob> segments;  // tall segments
  int64_t row_work = 0;              // multiply-adds in `rows`
};

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
    if (n_rows >= kGemmMinRows) {
      plan.segments.push_back({seg.row_begin, n_rows, seg.slot, rank});
      continue;
    }
    for (int64_t r = seg.row_begin; r < seg.row_end; ++r) plan.rows.push_back({r, seg.slot, rank});
    plan.row_work += n_rows * rank * (pass == LoraPass::shrink ? slots.d_in : slots.d_out);
  }
  return plan;
}

bool plan_empty(const LoraPlan& plan) {
  return plan.rows.empty() && plan.segments.empty();
}

}  // namespace

void lora_shrink(const float* x, int64_t ld_x, const LoraSlots& slots,
                 std::span<const LoraSegment> segments, float* h) {
  const LoraPlan plan = plan_lora(slots, segments, LoraPass::shrink, "lora_shrink");
  SPINDLE_KERNEL_REQUIRE(ld_x >= slots.d_in, "lora_shrink", "ld_x >= d_in");
  if (plan_empty(plan)) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && h != nullptr, "lora_shrink", "x and h must be non-null");

  const int64_t d_in = slots.d_in;
  const int64_t max_rank = slots.max_rank;
  const simd::Ops& ops = simd::ops();
  const auto n_row_jobs = static_cast<int64_t>(plan.rows.size());
  cpu::parallel_for(n_row_jobs, cpu::worth_parallel(plan.row_work), cpu::Schedule::dynamic, [&](int64_t i) {
    const RowJob& job = plan.rows[static_cast<size_t>(i)];
    const float* A_s = slots.A + int64_t{job.slot} * max_rank * d_in;
    ops.gemv(A_s, d_in, job.rank, d_in, x + job.row * ld_x, 1.0f, 0.0f, h + job.row * max_rank);
  });
  // Outside any OpenMP region: OpenBLAS runs its own threads.
  for (const SegmentJob& seg : plan.segments) {
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
  if (plan_empty(plan)) return;
  SPINDLE_KERNEL_REQUIRE(h != nullptr && y != nullptr, "lora_expand", "h and y must be non-null");

  const int64_t d_out = slots.d_out;
  const int64_t max_rank = slots.max_rank;
  const simd::Ops& ops = simd::ops();
  const auto n_row_jobs = static_cast<int64_t>(plan.rows.size());
  cpu::parallel_for(n_row_jobs, cpu::worth_parallel(plan.row_work), cpu::Schedule::dynamic, [&](int64_t i) {
    const RowJob& job = plan.rows[static_cast<size_t>(i)];
    const float* B_s = slots.B + int64_t{job.slot} * d_out * max_rank;
    // y[j] += scale · dot(B_s[j, 0:r], h_row): many short rows, one hadd tree per 8 outputs.
    ops.gemv(B_s, max_rank, d_out, job.rank, h + job.row * max_rank, slots.scale[job.slot], 1.0f,
             y + job.row * ld_y + col_offset);
  });
  for (const SegmentJob& seg : plan.segments) {
    const float* B_s = slots.B + int64_t{seg.slot} * d_out * max_rank;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(seg.n_rows), blasint(d_out),
                blasint(seg.rank), slots.scale[seg.slot], h + seg.row_begin * max_rank,
                blasint(max_rank), B_s, blasint(max_rank), 1.0f,
                y + seg.row_begin * ld_y + col_offset, blasint(ld_y));
  }
}

}  // namespace spindle::kernels
