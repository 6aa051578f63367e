// Run-time choice of the vector level, and the scalar reference path of every primitive.
// The scalar path is the plainest form of each contract (sequential float sums, expf), kept
// as the fallback for CPUs without AVX2 and as the baseline the vector paths are tested against.

#include "simd.h"

#include <atomic>
#include <cmath>

namespace spindle::kernels {
namespace simd {
namespace {

float dot_scalar(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void scale_scalar(float a, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

float sum_squares_scalar(const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

float max_scalar(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float exp_sum_scalar(const float* x, float shift, float* y, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - shift);
    if (y != nullptr) y[i] = e;
    s += e;
  }
  return s;
}

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = (g * (1.0f / (1.0f + std::exp(-g)))) * up[i];
  }
}

void gemv_scalar(const float* A, int64_t lda, int64_t m, int64_t n, const float* x, float alpha,
                 float beta, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float s = alpha * dot_scalar(A + i * lda, x, n);
    y[i] = beta == 0.0f ? s : s + beta * y[i];
  }
}

void axpy_rows_scalar(const float* a, const float* rows, int64_t ld, int64_t m, int64_t n,
                      float* y) {
  for (int64_t i = 0; i < m; ++i) axpy_scalar(a[i], rows + i * ld, y, n);
}

void gemv_multi_scalar(const float* A, int64_t lda, int64_t m, int64_t n, const float* X,
                       int64_t ldx, int64_t T, float alpha, float beta, float* Y, int64_t ldy) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t t = 0; t < T; ++t)
      gemv_scalar(A + i * lda, lda, 1, n, X + t * ldx, alpha, beta, Y + t * ldy + i);
}

constexpr Ops kScalarOps{dot_scalar,       axpy_scalar,      scale_scalar,    sum_squares_scalar,
                         max_scalar,       exp_sum_scalar,   silu_mul_scalar, gemv_scalar,
                         axpy_rows_scalar, gemv_multi_scalar};

SimdLevel detect() noexcept {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f")) return SimdLevel::avx512;
  if (avx2) return SimdLevel::avx2;
  return SimdLevel::scalar;
}

const Ops& table_for(SimdLevel level) noexcept {
  switch (level) {
    case SimdLevel::avx512:
      return avx512_ops();
    case SimdLevel::avx2:
      return avx2_ops();
    case SimdLevel::scalar:
      break;
  }
  return scalar_ops();
}

// nullptr until first use; then the table of the level in use.
std::atomic<const Ops*> g_active{nullptr};

const Ops* resolve() noexcept {
  const Ops* expected = nullptr;
  g_active.compare_exchange_strong(expected, &table_for(simd_level_detected()),
                                   std::memory_order_acq_rel);
  return g_active.load(std::memory_order_acquire);
}

}  // namespace

const Ops& scalar_ops() noexcept {
  return kScalarOps;
}

const Ops& ops() noexcept {
  const Ops* p = g_active.load(std::memory_order_acquire);
  if (p == nullptr) [[unlikely]]
    p = resolve();
  return *p;
}

}  // namespace simd

SimdLevel simd_level_detected() noexcept {
  static const SimdLevel level = simd::detect();
  return level;
}

SimdLevel simd_level() noexcept {
  const simd::Ops* p = &simd::ops();
  if (p == &simd::scalar_ops()) return SimdLevel::scalar;
  return p == &simd::table_for(SimdLevel::avx2) ? SimdLevel::avx2 : SimdLevel::avx512;
}

const char* simd_level_name(SimdLevel level) noexcept {
  switch (level) {
    case SimdLevel::avx512:
      return "avx512";
    case SimdLevel::avx2:
      return "avx2";
    case SimdLevel::scalar:
      break;
  }
  return "scalar";
}

SimdLevel set_simd_level_for_testing(SimdLevel level) noexcept {
  const SimdLevel best = simd_level_detected();
  const SimdLevel use = static_cast<uint8_t>(level) <= static_cast<uint8_t>(best) ? level : best;
  simd::g_active.store(&simd::table_for(use), std::memory_order_release);
  return use;
}

}  // namespace spindle::kernels
