#pragma once
// Shared helpers of the pointwise CUDA kernel tests: the no-device skip, typed tests over the
// element types (float, bf16), host<->device copies through fp32, inputs rounded to the element
// type (so a reference sees exactly what the kernel sees), and comparisons that name the index,
// the values and the tolerance.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda::test {

#define SPINDLE_REQUIRE_CUDA_DEVICE()                                                    \
  do {                                                                                   \
    if (::spindle::kernels::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

using ElementTypes = ::testing::Types<float, bf16>;

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

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <class T>
std::vector<T> to_elements(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return to_bf16(x);
  }
}

template <class T>
std::vector<float> to_floats(const std::vector<T>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return to_float(x);
  }
}

// x rounded to T and back: the values a T tensor holds.
template <class T>
std::vector<float> quantize(const std::vector<float>& x) {
  return to_floats<T>(to_elements<T>(x));
}

template <class T>
DeviceBuffer<T> upload_vec(const std::vector<T>& x) {
  DeviceBuffer<T> d(x.size());
  d.upload(x);
  return d;
}

// Uploads x as T (rounding to bf16 when T is bf16).
template <class T>
DeviceBuffer<T> upload_as(const std::vector<float>& x) {
  return upload_vec<T>(to_elements<T>(x));
}

template <class T>
std::vector<float> download_floats(const DeviceBuffer<T>& d) {
  return to_floats<T>(d.download());
}

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
