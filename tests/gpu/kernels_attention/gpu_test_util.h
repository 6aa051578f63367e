#pragma once
// Helpers of the GPU attention tests on top of ../gpu_test_util.h (skip, element types, seeded
// data, round trips): a comparison that names index, row, column, got, want and tolerance, and
// the contract-violation check.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../gpu_test_util.h"

namespace spindle::kernels::cuda::test {

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "float" : "bf16";
}

struct Tolerance {
  double abs;  // times max |want| over the compared buffer (1 when that is below 1)
  double rel;  // times |want|
};

// Every element: |got − want| <= abs·max(1, max|want|) + rel·|want| (a NaN never passes unless
// want is NaN too: untouched sentinel padding). The message names the first mismatch and the
// count of mismatches.
inline ::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& got,
                                            const std::vector<float>& want, int64_t cols,
                                            Tolerance tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " vs " << want.size();
  double scale = 1.0;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(double{w}));
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double w = want[i];
    const double allowed = tol.abs * scale + tol.rel * std::abs(w);
    const bool ok = std::isnan(w) ? std::isnan(g) : std::abs(g - w) <= allowed;
    if (!ok && bad++ == 0)
      first << "index " << i << " (row " << static_cast<int64_t>(i) / cols << ", col "
            << static_cast<int64_t>(i) % cols << "): got " << g << ", want " << w << ", tolerance "
            << allowed;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " mismatch; first at " << first.str();
}

// Runs f and expects std::invalid_argument whose message starts with "<kernel>: ".
template <class F>
::testing::AssertionResult throws_contract(F&& f, const std::string& kernel) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).rfind(kernel + ": ", 0) == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message does not name " << kernel << ": " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception";
}

}  // namespace spindle::kernels::cuda::test
