// AVX-512F table of the simd.h primitives (short-row gemv uses 256-bit AVX2+FMA inside it).
// simd.cpp hands this table out only when the CPU reports avx512f, avx2 and fma.

// GCC 12's _mm512_undefined_ps() (`__m512 __Y = __Y;`) trips -W(maybe-)uninitialized when
// AVX-512 is enabled by a target pragma instead of -mavx512f (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "simd.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f")
#endif

namespace spindle::kernels::simd {
namespace {

struct V {
  using R = __m512;
  using Ri = __m512i;
  static constexpr int64_t W = 16;
  // gemv_multi's register tile (32 zmm registers): 16 accumulators + 4 rows of A + 1 of X.
  static constexpr int kMultiRows = 4;
  static constexpr int kMultiCols = 4;

  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float a) { return _mm512_set1_ps(a); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static __mmask16 mask(int64_t n) {  // lanes [0, n) set, n in [0, 16]
    return static_cast<__mmask16>((1u << n) - 1u);
  }
  static R load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store_n(float* p, R v, int64_t n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  static R keep_n(R v, int64_t n) { return _mm512_maskz_mov_ps(mask(n), v); }

  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }    // a·b + c
  static R fnma(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a·b
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  static R min(R a, R b) { return _mm512_min_ps(a, b); }
  static R round(R x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static R select_gt(R x, R c, R then_v, R else_v) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, c, _CMP_GT_OQ), else_v, then_v);
  }

  static Ri cvt_i(R x) { return _mm512_cvtps_epi32(x); }
  static Ri srai1(Ri x) { return _mm512_srai_epi32(x, 1); }
  static Ri sub_i(Ri a, Ri b) { return _mm512_sub_epi32(a, b); }
  static R pow2(Ri k) {  // 2^k for k in [-126, 127]
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23));
  }

  // Own reductions: GCC 12's _mm512_reduce_*_ps trip -Wmaybe-uninitialized.
  static float hsum(R v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    __m128 h = _mm512_castps512_ps128(v);
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  static float hmax(R v) {
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    __m128 h = _mm512_castps512_ps128(v);
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
};

#include "simd_impl.h"

}  // namespace

const Ops& avx512_ops() noexcept {
  return make_ops();
}

}  // namespace spindle::kernels::simd

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
