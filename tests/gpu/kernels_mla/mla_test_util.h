#pragma once
// MLA's CUDA kernels (kernels/cuda/mla.cu, contract in spindle/kernels/cuda/mla.h) against
// independent double-precision references written here with naive loops, in fp32 and bf16 (bf16
// inputs are quantised first, so the reference sees exactly the values the kernel reads).
//
// Shapes: DeepSeek-like proportions scaled down (H 4, dn 16, dr 8, dv 16, R 32), odd sizes
// (H 3, dn 5, dr 6, dv 7, R 37), and a wide one whose columns exceed a block's threads (dn 144,
// dv 130, R 300). Every buffer has padded rows; columns and rows a kernel must neither read nor
// write hold NaN (q's rope columns, q_abs's rope columns, o_lat's rope columns, row padding, the
// kv_b rows of the other half, slot storage past a slot's rank), so a stray read poisons a
// checked value and a stray write shows up in the bitwise check of the untouched elements.
//
// Tolerances, |got − want| <= rtol·(|want| + rms(want over the checked elements)):
// - fp32, rtol 2e-5: fp32 arithmetic on O(1) values; dot products of at most a few hundred
//   terms (R = 300) with fp32 accumulation err by ~sqrt(n)·2^-24 relative to the rms, sincosf by
//   1–2 ulp; 2e-5 leaves a margin of more than 10 over that.
// - bf16, rtol 1e-2: the inputs are exact in the reference and the arithmetic is fp32, so the
//   error is the one rounding of the output to bf16 (at most 2^-9 ≈ 2e-3 relative); the
//   round trip inverse(forward(x)) rounds twice, each at most 2^-9 of its pair's magnitude,
//   within 2e-2 (rms term included).
// Where the contract pins the arithmetic exactly (mla_rope is cuda::rope's rotation then one
// multiply; sum_heads adds heads in order from 0.0f; copy_head_cols moves bits) the tests also
// compare bitwise.
//
// The host-side contract checks run without a device: bad arguments throw std::invalid_argument
// whose message starts with "cuda::<kernel>", before any CUDA call.
//
// This header holds what the suites share (mla_rope_test, mla_absorb_test, mla_layout_test).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../gpu_test_util.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/mla.h"
#include "spindle/kernels/cuda/rope.h"

namespace spindle::kernels::cuda::test {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct TypeNames {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "f32" : "bf16";
  }
};

template <class T>
constexpr double rtol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-2;
}

template <class T>
const char* dtype() {
  return std::is_same_v<T, float> ? "f32" : "bf16";
}

// MLA dimensions (mla.h): qw = dn + dr, lw = R + dr, kvw = dn + dv, P = max(qw, dv).
struct Dims {
  const char* name;
  int64_t H, dn, dr, dv, R;
  int64_t qw() const { return dn + dr; }
  int64_t lw() const { return R + dr; }
  int64_t kvw() const { return dn + dv; }
  int64_t P() const { return qw() > dv ? qw() : dv; }
};

const Dims kShapes[] = {
    {"deepseek-like", 4, 16, 8, 16, 32},
    {"odd", 3, 5, 6, 7, 37},
    {"wide", 2, 144, 8, 130, 300},
};

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Elements with touched[i] within tolerance of want[i]; every other element bitwise equal to
// init[i] (NaN sentinels included). ld names the (row, column) of a failure.
template <class T>
::testing::AssertionResult check_result(const std::string& what, const std::vector<T>& got,
                                        const std::vector<T>& init, const std::vector<double>& want,
                                        const std::vector<char>& touched, int64_t ld, double tol) {
  if (got.size() != init.size() || want.size() != init.size() || touched.size() != init.size()) {
    return ::testing::AssertionFailure() << what << ": size mismatch";
  }
  double sum_sq = 0.0;
  size_t n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (touched[i]) {
      sum_sq += want[i] * want[i];
      ++n;
    }
  }
  const double rms = n > 0 ? std::sqrt(sum_sq / double(n)) : 0.0;
  const std::vector<float> g = to_floats<T>(got);
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t row = int64_t(i) / ld, col = int64_t(i) % ld;
    if (!touched[i]) {
      if (!same_bits(got[i], init[i])) {
        return ::testing::AssertionFailure()
               << what << ": (" << row << ", " << col << ") must be untouched: got " << g[i]
               << ", was " << to_floats<T>({init[i]})[0];
      }
      continue;
    }
    const double err = std::abs(double(g[i]) - want[i]);
    const double bound = tol * (std::abs(want[i]) + rms);
    if (!(err <= bound)) {
      return ::testing::AssertionFailure()
             << what << ": (" << row << ", " << col << "): got " << g[i] << ", want " << want[i]
             << ", tolerance " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

inline std::vector<float> inv_freq_for(int64_t dr) {
  std::vector<float> f(size_t(dr / 2));
  for (int64_t i = 0; i < dr / 2; ++i) {
    f[size_t(i)] = float(1.0 / std::pow(10000.0, double(2 * i) / double(dr)));
  }
  return f;
}

// YaRN's attention factor for a scaling factor of 40 (DeepSeek-V3: 0.1·ln(40) + 1).
const float kYarnFactor = float(0.1 * std::log(40.0) + 1.0);

const std::vector<int32_t> kPositions = {0, 1, 7, 100, 1023, 4096, 30000};

// A [rows, ld] buffer of U(-2, 2) values with NaN in the row padding (columns >= used).
inline std::vector<float> padded_rows(int64_t rows, int64_t ld, int64_t used, uint32_t seed) {
  std::vector<float> x = random_floats(size_t(rows * ld), seed, -2.0f, 2.0f);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t c = used; c < ld; ++c) x[size_t(t * ld + c)] = kNaN;
  }
  return x;
}

// x[t, h·w + c] = NaN for c in [from, to), every row t and head h: columns of each head that a
// kernel must neither read nor write.
inline void nan_head_cols(std::vector<float>& x, int64_t rows, int64_t ld, int64_t heads, int64_t w,
                          int64_t from, int64_t to) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = from; c < to; ++c) x[size_t(t * ld + h * w + c)] = kNaN;
}

// Host-side contract checks: no device needed (the pointers are never dereferenced).
template <class F>
void expect_contract(F&& call, const std::string& kernel, const char* what) {
  try {
    call();
    ADD_FAILURE() << kernel << ": no std::invalid_argument for " << what;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(kernel + ": ", 0), 0u)
        << what << ": the message does not start with \"" << kernel << ": \": " << e.what();
  }
}

}  // namespace spindle::kernels::cuda::test
