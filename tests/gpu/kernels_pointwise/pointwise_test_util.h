#pragma once
// Helpers of the pointwise CUDA kernel tests on top of gpu_test_util.h (skip, element types,
// seeded data, round trips): typed-test names, per-dtype tolerances, and comparisons that name
// the index, the values and the tolerance.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "../gpu_test_util.h"

namespace spindle::kernels::cuda::test {

// The name these tests use for SPINDLE_REQUIRE_GPU (gpu_test_util.h).
#define SPINDLE_REQUIRE_CUDA_DEVICE() SPINDLE_REQUIRE_GPU()

struct ElementTypeNames {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "f32" : "bf16";
  }
};

// Per-dtype tolerances for outputs stored as T (fp32 math inside): |got − want| <= abs +
// rel·|want|.
template <class T>
struct Tol {
  static constexpr double rel = std::is_same_v<T, float> ? 1e-5 : 1e-2;
  static constexpr double abs = std::is_same_v<T, float> ? 1e-6 : 1e-3;
};

inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Compares got[i] with want[i] for every i; the failure names `what`, the index, both values
// and the tolerance.
template <class G, class W>
::testing::AssertionResult all_close(const std::vector<G>& got, const std::vector<W>& want,
                                     double abs_tol, double rel_tol, const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << ", want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = double(got[i]);
    const double w = double(want[i]);
    const double tol = abs_tol + rel_tol * std::abs(w);
    const bool same_inf = std::isinf(w) && g == w;
    if (!same_inf && !(std::abs(g - w) <= tol)) {
      return ::testing::AssertionFailure()
             << what << "[" << i << "]: got " << g << ", want " << w << ", |diff| "
             << std::abs(g - w) << " > tolerance " << tol;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace spindle::kernels::cuda::test
