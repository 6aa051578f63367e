#pragma once
// Helpers of the GPU LoRA/GEMM/NCCL kernel tests on top of ../gpu_test_util.h (skip, seeded
// data, dtype round trips): per-dtype tolerance and name, the upload fence, and a comparison
// that names the index, got, want and tolerance of the first mismatch.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "../gpu_test_util.h"

namespace spindle::kernels::cuda::test {

// Relative tolerance per dtype (fp32: rounding only; bf16: one bf16 rounding of the output).
template <class T>
constexpr double dtype_rtol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-2;
}

template <class T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
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
