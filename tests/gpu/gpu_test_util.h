#pragma once
// Helpers shared by every GPU test directory (tests/gpu/*): the skip without a device, the
// element types of typed tests, seeded data, and element-type round trips (inputs are rounded
// to the device type first, so a CPU reference sees exactly the values the kernel sees).
// Comparisons stay per directory: their tolerance models differ (see each directory's header).

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "spindle/kernels/cuda/runtime.h"
#include "test_random.h"

// First statement of every GPU test body: skips (green) on machines without a CUDA device.
#define SPINDLE_REQUIRE_GPU()                                                            \
  do {                                                                                   \
    if (::spindle::kernels::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace spindle::kernels::cuda::test {

using ::spindle::test::random_floats;

using ElementTypes = ::testing::Types<float, bf16>;

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

// x rounded to T and back (bf16: round to nearest even): the values a T buffer holds.
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

// got and want hold the same bits (NaN payloads included), or names the first index that
// differs: for results that must not depend on how a kernel was launched (fused vs unfused,
// one target vs several).
template <class T>
::testing::AssertionResult bitwise_equal(const std::string& what, const std::vector<T>& got,
                                         const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << ", want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure()
             << what << ": index " << i << ": got " << to_floats<T>({got[i]})[0] << ", want "
             << to_floats<T>({want[i]})[0] << " (bitwise)";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace spindle::kernels::cuda::test
