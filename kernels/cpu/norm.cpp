#include "spindle/kernels/norm.h"

#include <cmath>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {

// Numerics follow llama2.c's rmsnorm: the sum of squares is a float sum (the vector paths split
// it over lanes, a reordering of the same float sum), then ss/n + eps, 1/sqrtf, and each output
// is w[j]·(inv·x[j]) in that order.
void rmsnorm(const float* x, int64_t ld_x, const float* w, float* y, int64_t ld_y, int64_t rows,
             int64_t n, float eps, float* inv_rms) {
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && n > 0, "rmsnorm", "rows >= 0 and n > 0");
  SPINDLE_KERNEL_REQUIRE(ld_x >= n && ld_y >= n, "rmsnorm", "ld_x >= n and ld_y >= n");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && w != nullptr && y != nullptr, "rmsnorm",
                         "x, w and y must be non-null");
  const simd::Ops& ops = simd::ops();
  cpu::parallel_for(rows, cpu::worth_parallel(rows * n), cpu::Schedule::static_, [&](int64_t r) {
    const float* xr = x + r * ld_x;
    float* yr = y + r * ld_y;
    float ss = ops.sum_squares(xr, n);
    ss /= static_cast<float>(n);
    ss += eps;
    ss = 1.0f / std::sqrt(ss);
    if (inv_rms != nullptr) inv_rms[r] = ss;
    for (int64_t j = 0; j < n; ++j) yr[j] = w[j] * (ss * xr[j]);
  });
}

}  // namespace spindle::kernels
