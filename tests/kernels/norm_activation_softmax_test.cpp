// rmsnorm, swiglu, softmax and log_softmax at every vector level against double references.

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernel_test_util.h"
#include "spindle/kernels/activation.h"
#include "spindle/kernels/norm.h"
#include "spindle/kernels/softmax.h"

namespace spindle::kernels::test {
namespace {

using Elementwise = SimdLevelTest;

TEST_P(Elementwise, RmsnormMatchesReferenceWithStridesAndInvRms) {
  for (int64_t n : {1, 8, 13, 64, 100}) {
    const int64_t rows = 5, ld_x = n + 3, ld_y = n + 1;
    const float eps = 1e-5f;
    const auto x = random_floats(size_t(rows * ld_x), uint32_t(n), -3.0f, 3.0f);
    const auto w = random_floats(size_t(n), uint32_t(n) + 1, 0.5f, 1.5f);
    std::vector<float> y(size_t(rows * ld_y), 7.0f);
    std::vector<float> inv(static_cast<size_t>(rows));
    rmsnorm(x.data(), ld_x, w.data(), y.data(), ld_y, rows, n, eps, inv.data());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int64_t j = 0; j < n; ++j)
        ss += double(x[size_t(r * ld_x + j)]) * x[size_t(r * ld_x + j)];
      const double inv_ref = 1.0 / std::sqrt(ss / double(n) + eps);
      EXPECT_NEAR(inv[size_t(r)], inv_ref, 1e-5 * inv_ref);
      for (int64_t j = 0; j < n; ++j)
        ASSERT_NEAR(y[size_t(r * ld_y + j)], w[size_t(j)] * x[size_t(r * ld_x + j)] * inv_ref, 1e-5)
            << "n=" << n << " row=" << r << " j=" << j;
      if (ld_y > n) EXPECT_EQ(y[size_t(r * ld_y + n)], 7.0f) << "padding written";
    }
  }
}

TEST_P(Elementwise, RmsnormInPlaceManyRows) {
  const int64_t rows = 300, n = 1024;  // big enough to go parallel
  auto x = random_floats(size_t(rows * n), 5, -2.0f, 2.0f);
  const auto w = random_floats(size_t(n), 6);
  std::vector<float> y(x.size());
  rmsnorm(x.data(), n, w.data(), y.data(), n, rows, n, 1e-6f);
  rmsnorm(x.data(), n, w.data(), x.data(), n, rows, n, 1e-6f);  // y == x, no inv_rms
  EXPECT_EQ(x, y);
}

TEST_P(Elementwise, SwigluMatchesReferenceIncludingLargeGates) {
  auto gate = random_floats(10000, 21, -10.0f, 10.0f);
  const std::vector<float> extremes{-1000.0f, -100.0f, -88.5f, 0.0f, 88.5f, 100.0f, 1000.0f};
  std::copy(extremes.begin(), extremes.end(), gate.begin());
  const auto up = random_floats(gate.size(), 22, -2.0f, 2.0f);
  std::vector<float> out(gate.size());
  swiglu(gate.data(), up.data(), out.data(), int64_t(gate.size()));
  std::vector<double> want(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    want[i] = g / (1.0 + std::exp(-g)) * up[i];
  }
  EXPECT_TRUE(all_close(out, want, 1e-6, 1e-5));
  // In place over gate.
  swiglu(gate.data(), up.data(), gate.data(), int64_t(gate.size()));
  EXPECT_EQ(gate, out);
}

std::vector<double> softmax_ref(const std::vector<float>& x, int64_t rows, int64_t n, bool log) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, double(x[size_t(r * n + j)]));
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(double(x[size_t(r * n + j)]) - m);
    for (int64_t j = 0; j < n; ++j) {
      const double d = double(x[size_t(r * n + j)]) - m;
      y[size_t(r * n + j)] = log ? d - std::log(s) : std::exp(d) / s;
    }
  }
  return y;
}

TEST_P(Elementwise, SoftmaxAndLogSoftmaxMatchReference) {
  for (int64_t n : {1, 7, 16, 33, 1000}) {
    const int64_t rows = 4;
    const auto x = random_floats(size_t(rows * n), uint32_t(n), -20.0f, 20.0f);
    std::vector<float> y(x.size());
    softmax(x.data(), y.data(), rows, n);
    EXPECT_TRUE(all_close(y, softmax_ref(x, rows, n, false), 1e-7, 1e-5)) << n;
    log_softmax(x.data(), y.data(), rows, n);
    EXPECT_TRUE(all_close(y, softmax_ref(x, rows, n, true), 1e-5, 1e-5)) << n;
  }
}

TEST_P(Elementwise, SoftmaxSurvivesHugeAndInfiniteValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float big = 1e38f;  // big - (-big) stays finite in float
  // Row 0: huge floats of both signs; row 1: -inf entries beside finite ones; row 2: a
  // spread far beyond exp's range.
  const std::vector<float> x{big,    -big,    1e30f,  -1e30f, 0.0f, big,    -inf,   3.0f,
                             -inf,   1.0f,    -inf,   2.0f,   -inf, -inf,   0.5f,   -inf,
                             500.0f, -500.0f, 100.0f, 499.0f, 0.0f, -1e20f, 500.0f, 1e-30f};
  const int64_t rows = 3, n = 8;
  std::vector<float> y(x.size());
  softmax(x.data(), y.data(), rows, n);
  const auto want = softmax_ref(x, rows, n, false);
  EXPECT_TRUE(all_close(y, want, 1e-7, 1e-5));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[0], 0.5f, 1e-6);
  log_softmax(x.data(), y.data(), rows, n);
  const auto want_log = softmax_ref(x, rows, n, true);
  EXPECT_TRUE(all_close(y, want_log, 1e-5, 1e-5));
  EXPECT_EQ(y[8 + 0], -inf);
  // In place.
  std::vector<float> z = x;
  softmax(z.data(), z.data(), rows, n);
  EXPECT_TRUE(all_close(z, want, 1e-7, 1e-5));
  z = x;
  log_softmax(z.data(), z.data(), rows, n);
  EXPECT_TRUE(all_close(z, want_log, 1e-5, 1e-5));
}

TEST_P(Elementwise, SoftmaxManyRowsParallel) {
  const int64_t rows = 64, n = 5000;
  const auto x = random_floats(size_t(rows * n), 77, -30.0f, 30.0f);
  std::vector<float> y(x.size());
  softmax(x.data(), y.data(), rows, n);
  EXPECT_TRUE(all_close(y, softmax_ref(x, rows, n, false), 1e-7, 1e-5));
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += y[size_t(r * n + j)];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

SPINDLE_INSTANTIATE_SIMD_LEVELS(Elementwise);

TEST(ElementwiseContracts, ViolationsThrowInvalidArgument) {
  std::vector<float> buf(64, 1.0f);
  float* p = buf.data();
  EXPECT_THROW(rmsnorm(p, 8, p, p, 8, 2, 0, 1e-5f), std::invalid_argument);
  EXPECT_THROW(rmsnorm(p, 4, p, p, 8, 2, 8, 1e-5f), std::invalid_argument);
  EXPECT_THROW(rmsnorm(p, 8, p, p, 4, 2, 8, 1e-5f), std::invalid_argument);
  EXPECT_THROW(rmsnorm(nullptr, 8, p, p, 8, 2, 8, 1e-5f), std::invalid_argument);
  EXPECT_THROW(rmsnorm(p, 8, nullptr, p, 8, 2, 8, 1e-5f), std::invalid_argument);
  EXPECT_THROW(rmsnorm(p, 8, p, p, 8, -1, 8, 1e-5f), std::invalid_argument);
  EXPECT_NO_THROW(rmsnorm(nullptr, 8, nullptr, nullptr, 8, 0, 8, 1e-5f));
  EXPECT_THROW(swiglu(p, p, p, -1), std::invalid_argument);
  EXPECT_THROW(swiglu(nullptr, p, p, 4), std::invalid_argument);
  EXPECT_NO_THROW(swiglu(nullptr, nullptr, nullptr, 0));
  EXPECT_THROW(softmax(p, p, 2, 0), std::invalid_argument);
  EXPECT_THROW(softmax(nullptr, p, 2, 4), std::invalid_argument);
  EXPECT_THROW(log_softmax(p, p, -1, 4), std::invalid_argument);
  EXPECT_THROW(log_softmax(p, nullptr, 1, 4), std::invalid_argument);
}

}  // namespace
}  // namespace spindle::kernels::test
