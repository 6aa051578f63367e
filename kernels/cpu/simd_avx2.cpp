// AVX2 + FMA table of the simd.h primitives. Only the functions in the target region below use
// these instructions; simd.cpp hands this table out only when the CPU reports avx2 and fma.

#include <immintrin.h>

#include <cstdint>

#include "simd.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace spindle::kernels::simd {
namespace {

struct V {
  using R = __m256;
  using Ri = __m256i;
  static constexpr int64_t W = 8;
  // gemv_multi's register tile (16 ymm registers): 8 accumulators + 4 rows of A + 1 of X.
  static constexpr int kMultiRows = 4;
  static constexpr int kMultiCols = 2;

  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float a) { return _mm256_set1_ps(a); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static __m256i mask(int64_t n) {  // lanes [0, n) set, n in [0, 8]
    static const int32_t k[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + 8 - n));
  }
  static R load_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, mask(n)); }
  static void store_n(float* p, R v, int64_t n) { _mm256_maskstore_ps(p, mask(n), v); }
  static R keep_n(R v, int64_t n) { return _mm256_and_ps(v, _mm256_castsi256_ps(mask(n))); }

  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }    // a·b + c
  static R fnma(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a·b
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  static R min(R a, R b) { return _mm256_min_ps(a, b); }
  static R round(R x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static R select_gt(R x, R c, R then_v, R else_v) {
    return _mm256_blendv_ps(else_v, then_v, _mm256_cmp_ps(x, c, _CMP_GT_OQ));
  }

  static Ri cvt_i(R x) { return _mm256_cvtps_epi32(x); }
  static Ri srai1(Ri x) { return _mm256_srai_epi32(x, 1); }
  static Ri sub_i(Ri a, Ri b) { return _mm256_sub_epi32(a, b); }
  static R pow2(Ri k) {  // 2^k for k in [-126, 127]
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
  }

  static float hsum(R v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  static float hmax(R v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
};

#include "simd_impl.h"

}  // namespace

const Ops& avx2_ops() noexcept {
  return make_ops();
}

}  // namespace spindle::kernels::simd

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
