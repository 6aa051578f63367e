#include <cblas.h>

#include <algorithm>
#include <vector>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"
#include "spindle/kernels/lora.h"
#include "spindle/kernels/lora_plan.h"

namespace spindle::kernels {
namespace {

// Short-segment rows of one slot, at most kGroupMax of them and not necessarily adjacent: one
// axpy_rows call per dB row covers a group, with its coefficients gathered on the stack. A
// decode-like batch (one-row segments cycling through the slots) thus costs d_out calls per 16
// rows of a slot rather than per row.
constexpr int64_t kGroupMax = 16;

struct RowGroup {
  int32_t slot;
  int32_t rank;
  int64_t n_rows;
  int64_t rows[kGroupMax];
};

// One job of a weight gradient: rows [w_begin, w_end) of dA_s or dB_s, summed over every group
// of slot s. Jobs of one slot touch disjoint weight rows, so no two jobs write the same float.
struct WeightJob {
  int32_t slot;
  int32_t rank;
  int64_t w_begin;
  int64_t w_end;
  size_t group_begin;  // groups[group_begin, group_end) are the slot's groups
  size_t group_end;
};

// Groups of plan.rows, sorted by slot (row order within a slot).
std::vector<RowGroup> group_rows(const LoraPlan& plan) {
  std::vector<LoraRowJob> sorted = plan.rows;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const LoraRowJob& a, const LoraRowJob& b) { return a.slot < b.slot; });
  std::vector<RowGroup> groups;
  for (const LoraRowJob& r : sorted) {
    if (groups.empty() || groups.back().slot != r.slot || groups.back().n_rows == kGroupMax)
      groups.push_back({r.slot, r.rank, 0, {}});
    RowGroup& g = groups.back();
    g.rows[g.n_rows++] = r.row;
  }
  return groups;
}

// Splits each slot's weight rows [0, rows_of(rank)) into jobs of at most rows_per_job.
template <class RowsOf>
std::vector<WeightJob> weight_jobs(const std::vector<RowGroup>& groups, int64_t rows_per_job,
                                   RowsOf rows_of) {
  std::vector<WeightJob> jobs;
  for (size_t b = 0; b < groups.size();) {
    size_t e = b;
    while (e < groups.size() && groups[e].slot == groups[b].slot) ++e;
    const int64_t n_w = rows_of(groups[b].rank);
    for (int64_t w0 = 0; w0 < n_w; w0 += rows_per_job)
      jobs.push_back({groups[b].slot, groups[b].rank, w0, std::min(n_w, w0 + rows_per_job), b, e});
    b = e;
  }
  return jobs;
}

}  // namespace

// Short segments: dh rows (parallel over rows), then dB rows (parallel over (slot, dB-row block)
// jobs) on the simd primitives. Tall segments: two sgemms each, outside any OpenMP region.
void lora_expand_backward(const float* h, const float* dy, int64_t ld_dy, int64_t col_offset,
                          const LoraSlots& slots, std::span<const LoraSegment> segments, float* dh,
                          float* dB) {
  constexpr const char* kKernel = "lora_expand_backward";
  const LoraPlan plan = plan_lora(slots, segments, LoraPass::expand, kKernel);
  SPINDLE_KERNEL_REQUIRE(col_offset >= 0 && ld_dy >= col_offset + slots.d_out, kKernel,
                         "col_offset >= 0 and ld_dy >= col_offset + d_out");
  if (plan.empty()) return;
  SPINDLE_KERNEL_REQUIRE(h != nullptr && dy != nullptr && dh != nullptr && dB != nullptr, kKernel,
                         "h, dy, dh and dB must be non-null");

  const int64_t d_out = slots.d_out;
  const int64_t max_rank = slots.max_rank;
  const simd::Ops& ops = simd::ops();
  const bool parallel = cpu::worth_parallel(plan.row_work);
  // dh[t, 0:r] = c·Σ_j dy[t, j]·B_s[j, 0:r].
  cpu::parallel_for(
      static_cast<int64_t>(plan.rows.size()), parallel, cpu::Schedule::static_, [&](int64_t i) {
        const LoraRowJob& job = plan.rows[static_cast<size_t>(i)];
        const float* B_s = slot_b(slots.B, slots, job.slot);
        float* dh_t = dh + job.row * max_rank;
        std::fill(dh_t, dh_t + job.rank, 0.0f);
        ops.axpy_rows(dy + job.row * ld_dy + col_offset, B_s, job.rank, d_out, job.rank, dh_t);
        ops.scale(slots.scale[job.slot], dh_t, job.rank);
      });
  // dB_s[j, 0:r] += Σ_t (c·dy[t, j])·h[t, 0:r], with each group's h rows packed [n_rows, r].
  const std::vector<RowGroup> groups = group_rows(plan);
  const int64_t group_stride = kGroupMax * max_rank;
  std::vector<float> packed_h(groups.size() * static_cast<size_t>(group_stride));
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const RowGroup& g = groups[gi];
    for (int64_t t = 0; t < g.n_rows; ++t)
      std::copy_n(h + g.rows[t] * max_rank, g.rank,
                  packed_h.data() + static_cast<int64_t>(gi) * group_stride + t * g.rank);
  }
  const std::vector<WeightJob> b_jobs = weight_jobs(groups, 64, [&](int32_t) { return d_out; });
  cpu::parallel_for(
      static_cast<int64_t>(b_jobs.size()), parallel, cpu::Schedule::dynamic, [&](int64_t i) {
        const WeightJob& job = b_jobs[static_cast<size_t>(i)];
        const float c = slots.scale[job.slot];
        float* dB_s = slot_b(dB, slots, job.slot);
        float coef[kGroupMax];
        for (size_t gi = job.group_begin; gi < job.group_end; ++gi) {
          const RowGroup& g = groups[gi];
          const float* hg = packed_h.data() + static_cast<int64_t>(gi) * group_stride;
          for (int64_t j = job.w_begin; j < job.w_end; ++j) {
            for (int64_t t = 0; t < g.n_rows; ++t)
              coef[t] = c * dy[g.rows[t] * ld_dy + col_offset + j];
            ops.axpy_rows(coef, hg, job.rank, g.n_rows, job.rank, dB_s + j * job.rank);
          }
        }
      });
  for (const LoraSegmentJob& seg : plan.segments) {
    const float c = slots.scale[seg.slot];
    const float* B_s = slot_b(slots.B, slots, seg.slot);
    const float* dy_seg = dy + seg.row_begin * ld_dy + col_offset;
    const float* h_seg = h + seg.row_begin * max_rank;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(seg.n_rows), blasint(seg.rank),
                blasint(d_out), c, dy_seg, blasint(ld_dy), B_s, blasint(seg.rank), 0.0f,
                dh + seg.row_begin * max_rank, blasint(max_rank));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasint(d_out), blasint(seg.rank),
                blasint(seg.n_rows), c, dy_seg, blasint(ld_dy), h_seg, blasint(max_rank), 1.0f,
                slot_b(dB, slots, seg.slot), blasint(seg.rank));
  }
}

// Short segments: dx rows (parallel over rows), then dA rows (parallel over (slot, dA row) jobs)
// on the simd primitives. Tall segments: one or two sgemms each, outside any OpenMP region.
void lora_shrink_backward(const float* x, int64_t ld_x, const float* dh, const LoraSlots& slots,
                          std::span<const LoraSegment> segments, float* dA, float* dx,
                          int64_t ld_dx) {
  constexpr const char* kKernel = "lora_shrink_backward";
  const LoraPlan plan = plan_lora(slots, segments, LoraPass::shrink, kKernel);
  SPINDLE_KERNEL_REQUIRE(ld_x >= slots.d_in, kKernel, "ld_x >= d_in");
  SPINDLE_KERNEL_REQUIRE(dx == nullptr || ld_dx >= slots.d_in, kKernel,
                         "ld_dx >= d_in when dx is non-null");
  if (plan.empty()) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && dh != nullptr && dA != nullptr, kKernel,
                         "x, dh and dA must be non-null");

  const int64_t d_in = slots.d_in;
  const int64_t max_rank = slots.max_rank;
  const simd::Ops& ops = simd::ops();
  const bool parallel = cpu::worth_parallel(plan.row_work);
  // dx[t] += Σ_i dh[t, i]·A_s[i].
  if (dx != nullptr) {
    cpu::parallel_for(
        static_cast<int64_t>(plan.rows.size()), parallel, cpu::Schedule::static_, [&](int64_t i) {
          const LoraRowJob& job = plan.rows[static_cast<size_t>(i)];
          const float* A_s = slots.A + int64_t{job.slot} * max_rank * d_in;
          ops.axpy_rows(dh + job.row * max_rank, A_s, d_in, job.rank, d_in, dx + job.row * ld_dx);
        });
  }
  // dA_s[i] += Σ_t dh[t, i]·x[t]: one job per row i of each slot's dA.
  const std::vector<RowGroup> groups = group_rows(plan);
  const std::vector<WeightJob> a_jobs = weight_jobs(groups, 1, [](int32_t rank) { return rank; });
  cpu::parallel_for(
      static_cast<int64_t>(a_jobs.size()), parallel, cpu::Schedule::dynamic, [&](int64_t i) {
        const WeightJob& job = a_jobs[static_cast<size_t>(i)];
        float* dA_s = dA + int64_t{job.slot} * max_rank * d_in;
        for (size_t gi = job.group_begin; gi < job.group_end; ++gi) {
          const RowGroup& g = groups[gi];
          for (int64_t w = job.w_begin; w < job.w_end; ++w)
            for (int64_t t = 0; t < g.n_rows; ++t)
              ops.axpy(dh[g.rows[t] * max_rank + w], x + g.rows[t] * ld_x, dA_s + w * d_in, d_in);
        }
      });
  for (const LoraSegmentJob& seg : plan.segments) {
    const float* A_s = slots.A + int64_t{seg.slot} * max_rank * d_in;
    const float* dh_seg = dh + seg.row_begin * max_rank;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasint(seg.rank), blasint(d_in),
                blasint(seg.n_rows), 1.0f, dh_seg, blasint(max_rank), x + seg.row_begin * ld_x,
                blasint(ld_x), 1.0f, dA + int64_t{seg.slot} * max_rank * d_in, blasint(d_in));
    if (dx == nullptr) continue;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(seg.n_rows), blasint(d_in),
                blasint(seg.rank), 1.0f, dh_seg, blasint(max_rank), A_s, blasint(d_in), 1.0f,
                dx + seg.row_begin * ld_dx, blasint(ld_dx));
  }
}

}  // namespace spindle::kernels
