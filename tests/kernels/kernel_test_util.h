#pragma once
// Shared helpers of the kernel tests: seeded random data, and a fixture that runs a test body
// once per vector level (scalar, avx2, avx512), skipping levels this CPU lacks.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "spindle/kernels/cpu_features.h"
#include "test_random.h"

namespace spindle::kernels::test {

using ::spindle::test::random_floats;

// |actual - expected| <= abs_tol + rel_tol·|expected|, with a message naming the index.
inline ::testing::AssertionResult all_close(const float* actual, const double* expected, size_t n,
                                            double abs_tol, double rel_tol) {
  for (size_t i = 0; i < n; ++i) {
    const double e = expected[i];
    const double a = actual[i];
    const bool same_inf = std::isinf(e) && a == e;
    if (!same_inf && !(std::abs(a - e) <= abs_tol + rel_tol * std::abs(e)))
      return ::testing::AssertionFailure() << "index " << i << ": got " << a << ", expected " << e;
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const std::vector<float>& actual,
                                            const std::vector<double>& expected, double abs_tol,
                                            double rel_tol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  return all_close(actual.data(), expected.data(), actual.size(), abs_tol, rel_tol);
}

inline ::testing::AssertionResult all_close(const std::vector<float>& actual,
                                            const std::vector<float>& expected, double abs_tol,
                                            double rel_tol) {
  return all_close(actual, std::vector<double>(expected.begin(), expected.end()), abs_tol, rel_tol);
}

// Runs each TEST_P at one SimdLevel; restores the detected level afterwards.
class SimdLevelTest : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (set_simd_level_for_testing(GetParam()) != GetParam())
      GTEST_SKIP() << "CPU lacks " << simd_level_name(GetParam());
  }
  void TearDown() override { set_simd_level_for_testing(simd_level_detected()); }
};

inline std::string level_param_name(const ::testing::TestParamInfo<SimdLevel>& info) {
  return simd_level_name(info.param);
}

// Restores the detected level when a scope that switched levels ends.
struct ScopedSimdLevel {
  explicit ScopedSimdLevel(SimdLevel level) : active(set_simd_level_for_testing(level)) {}
  ~ScopedSimdLevel() { set_simd_level_for_testing(simd_level_detected()); }
  ScopedSimdLevel(const ScopedSimdLevel&) = delete;
  ScopedSimdLevel& operator=(const ScopedSimdLevel&) = delete;
  SimdLevel active;
};

}  // namespace spindle::kernels::test

#define SPINDLE_INSTANTIATE_SIMD_LEVELS(suite)                                       \
  INSTANTIATE_TEST_SUITE_P(Levels, suite,                                            \
                           ::testing::Values(::spindle::kernels::SimdLevel::scalar,  \
                                             ::spindle::kernels::SimdLevel::avx2,    \
                                             ::spindle::kernels::SimdLevel::avx512), \
                           ::spindle::kernels::test::level_param_name)
