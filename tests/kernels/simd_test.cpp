// The vector primitives at every level against double-precision references, including all
// tail lengths, and the exp polynomial's accuracy and special values.

#include <cmath>
#include <limits>
#include <vector>

#include "../../kernels/cpu/simd.h"
#include "kernel_test_util.h"

namespace spindle::kernels::test {
namespace {

using Primitives = SimdLevelTest;

double dot_ref(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return s;
}

TEST_P(Primitives, DotSumSquaresMaxEveryLength) {
  for (int64_t n = 1; n <= 80; ++n) {
    const auto a = random_floats(size_t(n), 1 + uint32_t(n));
    const auto b = random_floats(size_t(n), 100 + uint32_t(n));
    EXPECT_NEAR(simd::dot(a.data(), b.data(), n), dot_ref(a.data(), b.data(), n), 1e-5) << n;
    EXPECT_NEAR(simd::sum_squares(a.data(), n), dot_ref(a.data(), a.data(), n), 1e-5) << n;
    double m = a[0];
    for (float v : a) m = std::max(m, double(v));
    EXPECT_EQ(simd::max(a.data(), n), float(m)) << n;
  }
  EXPECT_EQ(simd::dot(nullptr, nullptr, 0), 0.0f);
}

TEST_P(Primitives, AxpyAndScaleTouchOnlyN) {
  for (int64_t n = 0; n <= 70; ++n) {
    const auto x = random_floats(size_t(n) + 8, 7 + uint32_t(n));
    auto y = random_floats(size_t(n) + 8, 9 + uint32_t(n));
    const auto y0 = y;
    simd::axpy(0.75f, x.data(), y.data(), n);
    for (int64_t i = 0; i < n + 8; ++i) {
      const float want = i < n ? y0[size_t(i)] + 0.75f * x[size_t(i)] : y0[size_t(i)];
      ASSERT_NEAR(y[size_t(i)], want, 1e-6) << n << " " << i;
    }
    auto z = y0;
    simd::scale(-2.0f, z.data(), n);
    for (int64_t i = 0; i < n + 8; ++i)
      ASSERT_EQ(z[size_t(i)], i < n ? -2.0f * y0[size_t(i)] : y0[size_t(i)]) << n << " " << i;
  }
}

TEST_P(Primitives, GemvShortAndLongRowsWithBeta) {
  for (int64_t n : {0, 1, 5, 8, 9, 16, 17, 24, 31, 32, 33, 47, 64, 100}) {
    for (int64_t m : {1, 3, 7, 8, 9, 17, 40}) {
      const int64_t lda = n + 3;
      const auto A = random_floats(size_t(m * lda), uint32_t(n * 131 + m));
      const auto x = random_floats(size_t(n), uint32_t(n + 5));
      for (float beta : {0.0f, 1.0f}) {
        std::vector<float> y = random_floats(size_t(m) + 1, 3);
        const auto y0 = y;
        if (beta == 0.0f) y[0] = std::numeric_limits<float>::quiet_NaN();  // must not be read
        simd::gemv(A.data(), lda, m, n, x.data(), 0.5f, beta, y.data());
        for (int64_t i = 0; i < m; ++i) {
          const double want = 0.5 * dot_ref(A.data() + i * lda, x.data(), n) +
                              (beta == 0.0f ? 0.0 : double(y0[size_t(i)]));
          ASSERT_NEAR(y[size_t(i)], want, 2e-5) << "n=" << n << " m=" << m << " i=" << i;
        }
        ASSERT_EQ(y[size_t(m)], y0[size_t(m)]) << "wrote past m";
      }
    }
  }
}

TEST_P(Primitives, AxpyRows) {
  for (int64_t n : {1, 7, 8, 16, 20, 63, 64, 65, 128, 130}) {
    for (int64_t m : {0, 1, 5, 16}) {
      const int64_t ld = n + 5;
      const auto rows = random_floats(size_t(m * ld), uint32_t(n * 7 + m));
      const auto a = random_floats(size_t(m), uint32_t(m + 11));
      auto y = random_floats(size_t(n) + 4, 13);
      const auto y0 = y;
      simd::axpy_rows(a.data(), rows.data(), ld, m, n, y.data());
      for (int64_t c = 0; c < n + 4; ++c) {
        double want = y0[size_t(c)];
        if (c < n)
          for (int64_t i = 0; i < m; ++i) want += double(a[size_t(i)]) * rows[size_t(i * ld + c)];
        ASSERT_NEAR(y[size_t(c)], want, 1e-5) << "n=" << n << " m=" << m << " c=" << c;
      }
    }
  }
}

TEST_P(Primitives, ExpAccuracyOverTheFloatRange) {
  std::vector<float> x;
  for (float v = -103.0f; v < 88.7f; v += 0.0137f) x.push_back(v);
  std::vector<float> y(x.size());
  simd::exp_sum(x.data(), 0.0f, y.data(), int64_t(x.size()));  // the sum overflows; unused
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::exp(double(x[i]));
    if (e >= double(std::numeric_limits<float>::min())) {
      ASSERT_NEAR(y[i] / e, 1.0, 4.0 * std::numeric_limits<float>::epsilon()) << x[i];
    } else {  // subnormal results: absolute error within a couple of subnormal steps
      ASSERT_NEAR(y[i], e, 4.0 * std::numeric_limits<float>::denorm_min()) << x[i];
    }
  }
}

TEST_P(Primitives, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{-inf, inf, std::nanf(""), 100.0f, -200.0f, 0.0f, 88.0f, -87.0f};
  std::vector<float> y(x.size());
  simd::exp_sum(x.data(), 0.0f, y.data(), int64_t(x.size()));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], inf);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], inf);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_NEAR(y[6] / std::exp(88.0), 1.0, 1e-6);
  EXPECT_NEAR(y[7] / std::exp(-87.0), 1.0, 1e-6);
}

TEST_P(Primitives, ExpSumWithoutOutputAndShift) {
  for (int64_t n : {1, 15, 16, 17, 33, 100}) {
    const auto x = random_floats(size_t(n), uint32_t(n), -5.0f, 5.0f);
    double want = 0.0;
    for (float v : x) want += std::exp(double(v) - 2.5);
    EXPECT_NEAR(simd::exp_sum(x.data(), 2.5f, nullptr, n) / want, 1.0, 1e-6) << n;
  }
}

TEST_P(Primitives, SiluMulTails) {
  for (int64_t n : {1, 7, 8, 9, 16, 31, 33}) {
    auto g = random_floats(size_t(n) + 2, uint32_t(n), -12.0f, 12.0f);
    const auto u = random_floats(size_t(n) + 2, uint32_t(n) + 1);
    std::vector<float> out(size_t(n) + 2, 42.0f);
    simd::silu_mul(g.data(), u.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double gd = g[size_t(i)];
      ASSERT_NEAR(out[size_t(i)], gd / (1.0 + std::exp(-gd)) * u[size_t(i)], 1e-5);
    }
    EXPECT_EQ(out[size_t(n)], 42.0f);
  }
}

SPINDLE_INSTANTIATE_SIMD_LEVELS(Primitives);

TEST(SimdDispatch, ForcingALevelIsClampedAndRestorable) {
  const SimdLevel best = simd_level_detected();
  EXPECT_EQ(set_simd_level_for_testing(SimdLevel::scalar), SimdLevel::scalar);
  EXPECT_EQ(simd_level(), SimdLevel::scalar);
  EXPECT_EQ(&simd::ops(), &simd::scalar_ops());
  EXPECT_EQ(set_simd_level_for_testing(SimdLevel::avx512), best);
  EXPECT_EQ(simd_level(), best);
  EXPECT_STREQ(simd_level_name(SimdLevel::avx2), "avx2");
}

}  // namespace
}  // namespace spindle::kernels::test
