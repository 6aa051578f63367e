#include <omp.h>

#include <algorithm>
#include <vector>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"
#include "spindle/kernels/norm.h"

namespace spindle::kernels {
namespace {

// Rows per job hold about this many elements (at most kJobRowsMax rows): large enough to
// amortise a job's dw partial, small enough that q/k-norm calls (rows = tokens × heads,
// n = head_dim) still split well and that a partial is a float sum of few terms.
constexpr int64_t kJobElements = int64_t{1} << 15;
constexpr int64_t kJobRowsMax = 64;

}  // namespace

// Per row: t = w ⊙ dy (float), s = Σ t·x (simd dot, float), then
// dx = inv·t − (inv³/n · s)·x [+ beta·dx]. dw: every job keeps a float partial over its
// (<= kJobRowsMax) rows; the partials are added in double, in job order, after the loop, so the
// result does not depend on the thread count (training runs are reproducible).
void rmsnorm_backward(const float* x, int64_t ld_x, const float* w, const float* inv_rms,
                      const float* dy, int64_t ld_dy, float* dx, int64_t ld_dx, int64_t rows,
                      int64_t n, float beta_dx, float* dw) {
  constexpr const char* kKernel = "rmsnorm_backward";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && n > 0, kKernel, "rows >= 0 and n > 0");
  SPINDLE_KERNEL_REQUIRE(ld_x >= n && ld_dy >= n && ld_dx >= n, kKernel,
                         "ld_x, ld_dy and ld_dx must be >= n");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(
      x != nullptr && w != nullptr && inv_rms != nullptr && dy != nullptr && dx != nullptr, kKernel,
      "x, w, inv_rms, dy and dx must be non-null");

  const int64_t rows_per_job = std::clamp<int64_t>(kJobElements / n, 1, kJobRowsMax);
  const int64_t n_jobs = (rows + rows_per_job - 1) / rows_per_job;
  const bool parallel = cpu::worth_parallel(rows * n * (dw != nullptr ? 6 : 4));
  const int64_t n_threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
  std::vector<float> scratch(static_cast<size_t>(n_threads * n));
  std::vector<float> partial(dw != nullptr ? static_cast<size_t>(n_jobs * n) : 0);
  const simd::Ops& ops = simd::ops();
  const float inv_n = 1.0f / static_cast<float>(n);

  cpu::parallel_for(n_jobs, parallel, cpu::Schedule::static_, [&](int64_t job) {
    float* t = scratch.data() + (parallel ? omp_get_thread_num() : 0) * n;
    float* pw = dw != nullptr ? partial.data() + job * n : nullptr;
    const int64_t r_end = std::min(rows, (job + 1) * rows_per_job);
    for (int64_t r = job * rows_per_job; r < r_end; ++r) {
      const float* xr = x + r * ld_x;
      const float* dyr = dy + r * ld_dy;
      float* dxr = dx + r * ld_dx;
      const float inv = inv_rms[r];
      if (pw != nullptr) {
        for (int64_t j = 0; j < n; ++j) {
          t[j] = w[j] * dyr[j];
          pw[j] += dyr[j] * xr[j] * inv;
        }
      } else {
        for (int64_t j = 0; j < n; ++j) t[j] = w[j] * dyr[j];
      }
      const float s = ops.dot(t, xr, n);
      const float coef = inv * inv * inv * inv_n * s;
      if (beta_dx == 0.0f) {  // dx may be uninitialised: never read it
        for (int64_t j = 0; j < n; ++j) dxr[j] = inv * t[j] - coef * xr[j];
      } else {
        for (int64_t j = 0; j < n; ++j) dxr[j] = inv * t[j] - coef * xr[j] + beta_dx * dxr[j];
      }
    }
  });
  if (dw == nullptr) return;
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (int64_t job = 0; job < n_jobs; ++job)
    for (int64_t j = 0; j < n; ++j)
      sum[static_cast<size_t>(j)] += partial[static_cast<size_t>(job * n + j)];
  for (int64_t j = 0; j < n; ++j) dw[j] += static_cast<float>(sum[static_cast<size_t>(j)]);
}

}  // namespace spindle::kernels
