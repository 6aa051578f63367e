#include "spindle/kernels/softmax.h"

#include <cmath>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {
namespace {

enum class SoftmaxKind : uint8_t { probs, log_probs };

// Max-subtracted, float sums (llama2.c's softmax: expf(x - max), then divide by the sum).
// A row whose max is +inf or NaN, or whose values are all -inf, yields NaN (IEEE propagation).
void softmax_rows(const float* x, float* y, int64_t rows, int64_t n, SoftmaxKind kind,
                  const char* kernel) {
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && n > 0, kernel, "rows >= 0 and n > 0");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && y != nullptr, kernel, "x and y must be non-null");
  const simd::Ops& ops = simd::ops();
  cpu::parallel_for(rows, cpu::worth_parallel(rows * n * 10), cpu::Schedule::static_, [&](int64_t r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float m = ops.max(xr, n);
    if (kind == SoftmaxKind::probs) {
      const float sum = ops.exp_sum(xr, m, yr, n);
      for (int64_t j = 0; j < n; ++j) yr[j] /= sum;
    } else {
      // y may alias x: the sum pass writes nothing.
      const float log_sum = std::log(ops.exp_sum(xr, m, nullptr, n));
      for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) - log_sum;
    }
  });
}

}  // namespace

void softmax(const float* x, float* y, int64_t rows, int64_t n) {
  softmax_rows(x, y, rows, n, SoftmaxKind::probs, "softmax");
}

void log_softmax(const float* x, float* y, int64_t rows, int64_t n) {
  softmax_rows(x, y, rows, n, SoftmaxKind::log_probs, "log_softmax");
}

}  // namespace spindle::kernels
