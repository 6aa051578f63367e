#pragma once
// Helpers of the GPU LoRA/GEMM/NCCL kernel tests: seeded data, dtype round trips (T = float or
// bf16; bf16 inputs are rounded on the host first so the CPU reference sees the same values),
// and a comparison that names the index, got, want and tolerance of the first mismatch.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "spindle/kernels/cuda/runtime.h"

#define SPINDLE_REQUIRE_GPU()                                                            \
  do {                                                                                   \
    if (::spindle::kernels::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace spindle::kernels::cuda::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Relative tolerance per dtype (fp32: rounding only; bf16: one bf16 rounding of the output).
template <class T>
constexpr double dtype_rtol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-2;
}

template <class T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

// The values a T buffer holds after uploading `v` (identity for float, bf16 rounding for bf16).
template <class T>
std::vector<float> round_to(const std::vector<float>& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    const std::vector<bf16> b = to_bf16(v);
    return to_float(b);
  }
}

template <class T>
DeviceBuffer<T> to_device(const std::vector<float>& v) {
  DeviceBuffer<T> buf(v.size());
  if constexpr (std::is_same_v<T, float>) {
    buf.upload(v);
  } else {
    const std::vector<bf16> b = to_bf16(v);
    buf.upload(b);
  }
  return buf;
}

template <class U>
DeviceBuffer<U> to_device_raw(const std::vector<U>& v) {
  DeviceBuffer<U> buf(v.size());
  buf.upload(v);
  return buf;
}

template <class T>
std::vector<float> to_host(const DeviceBuffer<T>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return buf.download();
  } else {
    const std::vector<bf16> b = buf.download();
    return to_float(b);
  }
}

// cudaMemcpy from pageable memory may return before its DMA lands, and a non-blocking stream
// does not wait for the legacy stream: uploads are fenced before launching on a Stream.
inline void fence_uploads() {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// |got - want| <= rtol · (|want| + rms(want)) elementwise; NaN in want (an element the kernel
// must leave untouched, initialised to NaN) must stay NaN. rms over the finite wants.
inline ::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& got,
                                            const std::vector<double>& want, double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << ", want " << want.size();
  }
  double sum_sq = 0.0;
  size_t finite = 0;
  for (double w : want) {
    if (std::isfinite(w)) {
      sum_sq += w * w;
      ++finite;
    }
  }
  const double rms = finite > 0 ? std::sqrt(sum_sq / double(finite)) : 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double w = want[i];
    if (std::isnan(w)) {
      if (!std::isnan(g)) {
        return ::testing::AssertionFailure()
               << what << ": index " << i << ": got " << g << ", want untouched (NaN)";
      }
      continue;
    }
    const double tol = rtol * (std::abs(w) + rms);
    if (!(std::abs(g - w) <= tol)) {
      return ::testing::AssertionFailure()
             << what << ": index " << i << ": got " << g << ", want " << w << ", tolerance " << tol;
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& got,
                                            const std::vector<float>& want, double rtol) {
  return all_close(what, got, std::vector<double>(want.begin(), want.end()), rtol);
}

}  // namespace spindle::kernels::cuda::test
