// rmsnorm_backward and swiglu_backward at every vector level against naive double backward
// references, which central finite differences of a double forward check in turn.

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernel_test_util.h"
#include "spindle/kernels/activation.h"
#include "spindle/kernels/norm.h"

namespace spindle::kernels::test {
namespace {

using Backward = SimdLevelTest;

// Central difference of f at v[i] in double.
double central_difference(std::vector<double>& v, size_t i, const std::function<double()>& f,
                          double step = 1e-6) {
  const double keep = v[i];
  v[i] = keep + step;
  const double up = f();
  v[i] = keep - step;
  const double down = f();
  v[i] = keep;
  return (up - down) / (2.0 * step);
}

// One rmsnorm row in double: y = w ⊙ x / sqrt(mean(x²) + eps).
struct RmsRow {
  std::vector<double> x, w;
  double eps;
  double inv() const {
    double ss = 0.0;
    for (double v : x) ss += v * v;
    return 1.0 / std::sqrt(ss / double(x.size()) + eps);
  }
  // Σ y·r.
  double functional(const std::vector<double>& r) const {
    const double iv = inv();
    double f = 0.0;
    for (size_t j = 0; j < x.size(); ++j) f += r[j] * w[j] * x[j] * iv;
    return f;
  }
  // The header's formula: dx = inv·(w⊙dy) − inv³/n·x·Σ w·dy·x.
  std::vector<double> dx(const std::vector<double>& dy) const {
    const double iv = inv();
    const auto n = double(x.size());
    double s = 0.0;
    for (size_t j = 0; j < x.size(); ++j) s += w[j] * dy[j] * x[j];
    std::vector<double> out(x.size());
    for (size_t j = 0; j < x.size(); ++j) out[j] = iv * w[j] * dy[j] - iv * iv * iv / n * x[j] * s;
    return out;
  }
};

TEST(RmsnormBackwardReference, MatchesFiniteDifferences) {
  for (size_t n : {1u, 7u, 64u}) {
    const auto xf = random_floats(n, uint32_t(n), -2.0f, 2.0f);
    const auto wf = random_floats(n, uint32_t(n) + 1, 0.5f, 1.5f);
    const auto rf = random_floats(n, uint32_t(n) + 2);
    RmsRow row{{xf.begin(), xf.end()}, {wf.begin(), wf.end()}, 1e-5};
    const std::vector<double> r(rf.begin(), rf.end());
    const auto dx = row.dx(r);
    const auto f = [&] { return row.functional(r); };
    for (size_t j = 0; j < n; ++j) {
      EXPECT_NEAR(dx[j], central_difference(row.x, j, f), 1e-7) << "dx n=" << n << " j=" << j;
      // dw[j] = dy_j·x_j·inv.
      EXPECT_NEAR(r[j] * row.x[j] * row.inv(), central_difference(row.w, j, f), 1e-7) << "dw";
    }
  }
}

struct RmsCase {
  int64_t rows, n;
  bool with_dw;
};

void check_rmsnorm_backward(const RmsCase& c, float beta, uint32_t seed) {
  const int64_t ld_x = c.n + 3, ld_dy = c.n + 1, ld_dx = c.n + 2;
  const float eps = 1e-5f;
  const auto x = random_floats(size_t(c.rows * ld_x), seed, -3.0f, 3.0f);
  const auto w = random_floats(size_t(c.n), seed + 1, 0.5f, 1.5f);
  const auto dy = random_floats(size_t(c.rows * ld_dy), seed + 2);
  std::vector<float> y(size_t(c.rows * c.n)), inv(size_t(c.rows));
  rmsnorm(x.data(), ld_x, w.data(), y.data(), c.n, c.rows, c.n, eps, inv.data());
  // beta 0 must not read dx: it starts as NaN there.
  auto dx = beta == 0.0f ? std::vector<float>(size_t(c.rows * ld_dx), std::nanf(""))
                         : random_floats(size_t(c.rows * ld_dx), seed + 3);
  const auto dx0 = dx;
  auto dw = random_floats(size_t(c.n), seed + 4);
  const auto dw0 = dw;
  rmsnorm_backward(x.data(), ld_x, w.data(), inv.data(), dy.data(), ld_dy, dx.data(), ld_dx, c.rows,
                   c.n, beta, c.with_dw ? dw.data() : nullptr);

  std::vector<double> want_dw(dw0.begin(), dw0.end());
  for (int64_t r = 0; r < c.rows; ++r) {
    RmsRow row{{x.begin() + r * ld_x, x.begin() + r * ld_x + c.n}, {w.begin(), w.end()}, eps};
    const std::vector<double> dyr(dy.begin() + r * ld_dy, dy.begin() + r * ld_dy + c.n);
    auto want = row.dx(dyr);
    double mag = 0.0;  // float error scales with the size of the row's terms
    for (int64_t j = 0; j < c.n; ++j)
      mag = std::max(mag, std::abs(row.inv() * w[size_t(j)] * dyr[size_t(j)]));
    for (int64_t j = 0; j < c.n; ++j) {
      const size_t at = size_t(r * ld_dx + j);
      if (beta != 0.0f) want[size_t(j)] += beta * double(dx0[at]);
      ASSERT_NEAR(dx[at], want[size_t(j)], 1e-5 * (1.0 + mag) + 1e-5 * std::abs(want[size_t(j)]))
          << "rows=" << c.rows << " n=" << c.n << " beta=" << beta << " row=" << r << " j=" << j;
      want_dw[size_t(j)] += dyr[size_t(j)] * row.x[size_t(j)] * row.inv();
    }
    for (int64_t j = c.n; j < ld_dx; ++j) {
      const size_t at = size_t(r * ld_dx + j);
      if (beta == 0.0f) {
        ASSERT_TRUE(std::isnan(dx[at])) << "padding written";
      } else {
        ASSERT_EQ(dx[at], dx0[at]) << "padding written";
      }
    }
  }
  if (c.with_dw) {
    EXPECT_TRUE(all_close(dw, want_dw, 1e-5, 1e-5)) << "rows=" << c.rows << " n=" << c.n;
  } else {
    EXPECT_EQ(dw, dw0);
  }
}

TEST_P(Backward, RmsnormOverwriteAccumulateAndDw) {
  for (int64_t n : {1, 8, 13, 64, 100}) {
    check_rmsnorm_backward({5, n, true}, 0.0f, uint32_t(n));
    check_rmsnorm_backward({5, n, true}, 1.0f, uint32_t(n) + 10);
    check_rmsnorm_backward({3, n, false}, 1.0f, uint32_t(n) + 20);
  }
}

TEST_P(Backward, RmsnormManyRowsParallel) {
  check_rmsnorm_backward({300, 1024, true}, 1.0f, 31);  // hidden-state norm, goes parallel
  check_rmsnorm_backward({2048, 128, true}, 0.0f, 32);  // per-head q/k norm shape
}

// swiglu in double and its derivative through σ.
double sigmoid(double g) {
  return 1.0 / (1.0 + std::exp(-g));
}

TEST(SwigluBackwardReference, MatchesFiniteDifferences) {
  for (double g : {-20.0, -3.0, -0.5, 0.0, 0.7, 4.0, 20.0}) {
    const double up = 1.3;
    std::vector<double> v{g};
    const auto f = [&] { return v[0] * sigmoid(v[0]) * up; };
    const double s = sigmoid(g);
    EXPECT_NEAR(up * s * (1.0 + g * (1.0 - s)), central_difference(v, 0, f), 1e-7) << g;
  }
}

TEST_P(Backward, SwigluIncludingLargeGates) {
  auto gate = random_floats(10000, 41, -10.0f, 10.0f);
  const std::vector<float> extremes{-1e30f, -1000.0f, -100.0f, -88.5f,  -87.0f, 0.0f,
                                    87.0f,  88.5f,    100.0f,  1000.0f, 1e30f};
  std::copy(extremes.begin(), extremes.end(), gate.begin());
  const auto up = random_floats(gate.size(), 42, -2.0f, 2.0f);
  const auto d_out = random_floats(gate.size(), 43, -2.0f, 2.0f);
  std::vector<float> d_gate(gate.size(), 7.0f), d_up(gate.size(), 7.0f);
  swiglu_backward(gate.data(), up.data(), d_out.data(), d_gate.data(), d_up.data(),
                  int64_t(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double s = sigmoid(g);
    const double want_up = double(d_out[i]) * g * s;
    // silu'(g) → 0 as g → −∞; the product form 1 + g·(1 − σ) overflows nothing for finite g.
    const double dsilu = g < -700.0 ? 0.0 : s * (1.0 + g * (1.0 - s));
    const double want_gate = double(d_out[i]) * up[i] * dsilu;
    ASSERT_TRUE(std::isfinite(d_gate[i]) && std::isfinite(d_up[i])) << "gate " << g;
    ASSERT_NEAR(d_up[i], want_up, 1e-6 + 2e-6 * std::abs(want_up)) << "gate " << g;
    ASSERT_NEAR(d_gate[i], want_gate, 1e-6 + 2e-6 * std::abs(want_gate)) << "gate " << g;
  }
}

TEST_P(Backward, SwigluTailsAndParallelSizes) {
  for (int64_t count : {int64_t{1}, int64_t{15}, int64_t{517}, int64_t{4096 * 20 + 3}}) {
    const auto gate = random_floats(size_t(count), uint32_t(count), -6.0f, 6.0f);
    const auto up = random_floats(size_t(count), uint32_t(count) + 1);
    const auto d_out = random_floats(size_t(count), uint32_t(count) + 2);
    std::vector<float> d_gate(size_t(count) + 1, 7.0f), d_up(size_t(count) + 1, 7.0f);
    swiglu_backward(gate.data(), up.data(), d_out.data(), d_gate.data(), d_up.data(), count);
    for (int64_t i = 0; i < count; ++i) {
      const double g = gate[size_t(i)], s = sigmoid(g);
      ASSERT_NEAR(d_up[size_t(i)], double(d_out[size_t(i)]) * g * s, 1e-5);
      ASSERT_NEAR(d_gate[size_t(i)],
                  double(d_out[size_t(i)]) * up[size_t(i)] * s * (1 + g * (1 - s)), 1e-5);
    }
    EXPECT_EQ(d_gate[size_t(count)], 7.0f);
    EXPECT_EQ(d_up[size_t(count)], 7.0f);
  }
}

SPINDLE_INSTANTIATE_SIMD_LEVELS(Backward);

TEST(BackwardContracts, RmsnormAndSwigluViolationsThrow) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), dx(64, 5.0f), inv(8, 1.0f), dw(8, 0.0f);
  const auto rms = [&](int64_t ld_x, int64_t ld_dy, int64_t ld_dx, int64_t rows, int64_t n,
                       const float* inv_rms) {
    rmsnorm_backward(a.data(), ld_x, b.data(), inv_rms, a.data(), ld_dy, dx.data(), ld_dx, rows, n,
                     0.0f, dw.data());
  };
  EXPECT_NO_THROW(rms(8, 8, 8, 4, 8, inv.data()));
  std::fill(dx.begin(), dx.end(), 5.0f);
  EXPECT_THROW(rms(7, 8, 8, 4, 8, inv.data()), std::invalid_argument);
  EXPECT_THROW(rms(8, 7, 8, 4, 8, inv.data()), std::invalid_argument);
  EXPECT_THROW(rms(8, 8, 7, 4, 8, inv.data()), std::invalid_argument);
  EXPECT_THROW(rms(8, 8, 8, -1, 8, inv.data()), std::invalid_argument);
  EXPECT_THROW(rms(8, 8, 8, 4, 0, inv.data()), std::invalid_argument);
  EXPECT_THROW(rms(8, 8, 8, 4, 8, nullptr), std::invalid_argument);
  EXPECT_EQ(std::count(dx.begin(), dx.end(), 5.0f), int64_t(dx.size())) << "wrote before throwing";
  EXPECT_NO_THROW(rms(8, 8, 8, 0, 8, nullptr));  // no rows: nothing read
  EXPECT_THROW(swiglu_backward(a.data(), b.data(), a.data(), dx.data(), nullptr, 4),
               std::invalid_argument);
  EXPECT_THROW(swiglu_backward(a.data(), b.data(), a.data(), dx.data(), dw.data(), -1),
               std::invalid_argument);
  EXPECT_NO_THROW(swiglu_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 0));
}

}  // namespace
}  // namespace spindle::kernels::test
