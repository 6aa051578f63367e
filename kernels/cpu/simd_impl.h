// Vector bodies of the simd.h primitives, written once over a vector-traits type `V`.
//
// No include guard on purpose: simd_avx2.cpp and simd_avx512.cpp each include this file once,
// inside a `#pragma GCC target` region and an anonymous namespace that defines `V`, so every
// function here is compiled for that instruction set only and never leaks to other code.
// V provides: R (float register), Ri (int register), W (lanes), kMultiRows × kMultiCols (the
// register tile of gemv_multi), and the operations used below;
// load_n/store_n touch only the first n (< = W) lanes and never fault past them.

// Σ a[i]·b[i] with four independent accumulators.
inline float dot_v(const float* a, const float* b, int64_t n) {
  constexpr int64_t W = V::W;
  typename V::R s0 = V::zero(), s1 = V::zero(), s2 = V::zero(), s3 = V::zero();
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    s0 = V::fma(V::load(a + i), V::load(b + i), s0);
    s1 = V::fma(V::load(a + i + W), V::load(b + i + W), s1);
    s2 = V::fma(V::load(a + i + 2 * W), V::load(b + i + 2 * W), s2);
    s3 = V::fma(V::load(a + i + 3 * W), V::load(b + i + 3 * W), s3);
  }
  for (; i + W <= n; i += W) s0 = V::fma(V::load(a + i), V::load(b + i), s0);
  if (i < n) s1 = V::fma(V::load_n(a + i, n - i), V::load_n(b + i, n - i), s1);
  return V::hsum(V::add(V::add(s0, s1), V::add(s2, s3)));
}

inline float sum_squares_v(const float* x, int64_t n) {
  constexpr int64_t W = V::W;
  typename V::R s0 = V::zero(), s1 = V::zero(), s2 = V::zero(), s3 = V::zero();
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    const auto x0 = V::load(x + i), x1 = V::load(x + i + W);
    const auto x2 = V::load(x + i + 2 * W), x3 = V::load(x + i + 3 * W);
    s0 = V::fma(x0, x0, s0);
    s1 = V::fma(x1, x1, s1);
    s2 = V::fma(x2, x2, s2);
    s3 = V::fma(x3, x3, s3);
  }
  for (; i + W <= n; i += W) {
    const auto v = V::load(x + i);
    s0 = V::fma(v, v, s0);
  }
  if (i < n) {
    const auto v = V::load_n(x + i, n - i);
    s1 = V::fma(v, v, s1);
  }
  return V::hsum(V::add(V::add(s0, s1), V::add(s2, s3)));
}

inline void axpy_v(float a, const float* x, float* y, int64_t n) {
  constexpr int64_t W = V::W;
  const auto av = V::set1(a);
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    V::store(y + i, V::fma(av, V::load(x + i), V::load(y + i)));
    V::store(y + i + W, V::fma(av, V::load(x + i + W), V::load(y + i + W)));
  }
  for (; i + W <= n; i += W) V::store(y + i, V::fma(av, V::load(x + i), V::load(y + i)));
  if (i < n) V::store_n(y + i, V::fma(av, V::load_n(x + i, n - i), V::load_n(y + i, n - i)), n - i);
}

inline void scale_v(float a, float* x, int64_t n) {
  constexpr int64_t W = V::W;
  const auto av = V::set1(a);
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(x + i, V::mul(av, V::load(x + i)));
  if (i < n) V::store_n(x + i, V::mul(av, V::load_n(x + i, n - i)), n - i);
}

// n >= 1. A short row is handled in scalar; otherwise the last vector overlaps the previous
// ones, which max does not mind.
inline float max_v(const float* x, int64_t n) {
  constexpr int64_t W = V::W;
  if (n < W) {
    float m = x[0];
    for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
  }
  auto m = V::load(x);
  for (int64_t i = W; i + W <= n; i += W) m = V::max(m, V::load(x + i));
  m = V::max(m, V::load(x + n - W));
  return V::hmax(m);
}

// exp(x), Cephes expf: x = k·ln2 + r, |r| <= ln2/2, degree-6 polynomial in r, times 2^k built
// from exponent bits as 2^k1·2^k2 so both factors stay normal for k in [-150, 128] (gradual
// underflow comes out of the last multiply). NaN propagates; x > ln(FLT_MAX) gives +inf.
inline typename V::R exp_v(typename V::R x) {
  const auto hi = V::set1(88.7228394f);
  // max/min return their second operand when it is NaN: x goes second so NaN survives.
  const auto xc = V::min(hi, V::max(V::set1(-104.0f), x));
  const auto k = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  auto r = V::fnma(k, V::set1(0.693359375f), xc);
  r = V::fnma(k, V::set1(-2.12194440e-4f), r);
  auto p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  p = V::fma(p, V::mul(r, r), r);
  p = V::add(p, V::set1(1.0f));
  const auto ki = V::cvt_i(k);
  const auto k1 = V::srai1(ki);
  const auto k2 = V::sub_i(ki, k1);
  p = V::mul(V::mul(p, V::pow2(k1)), V::pow2(k2));
  return V::select_gt(x, hi, V::set1(__builtin_inff()), p);
}

inline float exp_sum_v(const float* x, float shift, float* y, int64_t n) {
  constexpr int64_t W = V::W;
  const auto sv = V::set1(shift);
  auto s0 = V::zero(), s1 = V::zero();
  int64_t i = 0;
  if (y != nullptr) {
    for (; i + 2 * W <= n; i += 2 * W) {
      const auto e0 = exp_v(V::sub(V::load(x + i), sv));
      const auto e1 = exp_v(V::sub(V::load(x + i + W), sv));
      V::store(y + i, e0);
      V::store(y + i + W, e1);
      s0 = V::add(s0, e0);
      s1 = V::add(s1, e1);
    }
  } else {
    for (; i + 2 * W <= n; i += 2 * W) {
      s0 = V::add(s0, exp_v(V::sub(V::load(x + i), sv)));
      s1 = V::add(s1, exp_v(V::sub(V::load(x + i + W), sv)));
    }
  }
  for (; i < n; i += W) {
    const int64_t c = n - i < W ? n - i : W;
    const auto e = V::keep_n(exp_v(V::sub(V::load_n(x + i, c), sv)), c);
    if (y != nullptr) V::store_n(y + i, e, c);
    s0 = V::add(s0, e);
  }
  return V::hsum(V::add(s0, s1));
}

// Same operation order as the scalar path: (g · (1 / (1 + e^-g))) · up.
inline void silu_mul_v(const float* gate, const float* up, float* out, int64_t n) {
  constexpr int64_t W = V::W;
  const auto one = V::set1(1.0f);
  for (int64_t i = 0; i < n; i += W) {
    const int64_t c = n - i < W ? n - i : W;
    const auto g = c == W ? V::load(gate + i) : V::load_n(gate + i, c);
    const auto u = c == W ? V::load(up + i) : V::load_n(up + i, c);
    const auto e = exp_v(V::sub(V::zero(), g));
    const auto v = V::mul(V::mul(g, V::div(one, V::add(one, e))), u);
    if (c == W) {
      V::store(out + i, v);
    } else {
      V::store_n(out + i, v, c);
    }
  }
}

inline float gemv_finish(float s, float alpha, float beta, const float* y) {
  return beta == 0.0f ? alpha * s : alpha * s + beta * *y;
}

// gemv for long rows (n > 128): four rows share each load of x.
inline void gemv_long_v(const float* A, int64_t lda, int64_t m, int64_t n, const float* x,
                        float alpha, float beta, float* y) {
  constexpr int64_t W = V::W;
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    const float* r0 = A + i * lda;
    const float* r1 = r0 + lda;
    const float* r2 = r1 + lda;
    const float* r3 = r2 + lda;
    auto a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
    int64_t k = 0;
    for (; k + W <= n; k += W) {
      const auto xv = V::load(x + k);
      a0 = V::fma(V::load(r0 + k), xv, a0);
      a1 = V::fma(V::load(r1 + k), xv, a1);
      a2 = V::fma(V::load(r2 + k), xv, a2);
      a3 = V::fma(V::load(r3 + k), xv, a3);
    }
    if (k < n) {
      const int64_t c = n - k;
      const auto xv = V::load_n(x + k, c);
      a0 = V::fma(V::load_n(r0 + k, c), xv, a0);
      a1 = V::fma(V::load_n(r1 + k, c), xv, a1);
      a2 = V::fma(V::load_n(r2 + k, c), xv, a2);
      a3 = V::fma(V::load_n(r3 + k, c), xv, a3);
    }
    y[i] = gemv_finish(V::hsum(a0), alpha, beta, y + i);
    y[i + 1] = gemv_finish(V::hsum(a1), alpha, beta, y + i + 1);
    y[i + 2] = gemv_finish(V::hsum(a2), alpha, beta, y + i + 2);
    y[i + 3] = gemv_finish(V::hsum(a3), alpha, beta, y + i + 3);
  }
  for (; i < m; ++i) y[i] = gemv_finish(dot_v(A + i * lda, x, n), alpha, beta, y + i);
}

// Eight row sums of eight 8-lane accumulators: [Σa0, Σa1, ..., Σa7].
inline __m256 hsum_8x8(const __m256* a) {
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 s67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23);
  const __m256 s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

inline __m256i mask8(int64_t n) {  // lanes [0, n) set, n in [0, 8]
  static const int32_t k[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + 8 - n));
}

// gemv for short rows (n <= 128, NC = ceil(n / 8) chunks of 8 lanes): eight rows are reduced
// together by one hadd tree, so a row costs about NC loads and FMAs plus 1/8 of the tree. Used
// for LoRA expand (n = rank) and attention scores (n = head_dim).
template <int NC>
inline void gemv_short_v(const float* A, int64_t lda, int64_t m, int64_t n, const float* x,
                         float alpha, float beta, float* y) {
  const int64_t last = n - 8 * (NC - 1);  // lanes in the last chunk, 1..8
  const __m256i tail = mask8(last);
  __m256 xs[NC];
  for (int c = 0; c < NC - 1; ++c) xs[c] = _mm256_loadu_ps(x + 8 * c);
  xs[NC - 1] = _mm256_maskload_ps(x + 8 * (NC - 1), tail);
  const auto row_acc = [&](const float* row) {
    __m256 acc =
        _mm256_mul_ps(NC == 1 ? _mm256_maskload_ps(row, tail) : _mm256_loadu_ps(row), xs[0]);
    for (int c = 1; c < NC; ++c) {
      const __m256 v =
          c == NC - 1 ? _mm256_maskload_ps(row + 8 * c, tail) : _mm256_loadu_ps(row + 8 * c);
      acc = _mm256_fmadd_ps(v, xs[c], acc);
    }
    return acc;
  };
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) {
    __m256 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = row_acc(A + (i + r) * lda);
    __m256 s = _mm256_mul_ps(hsum_8x8(acc), av);
    if (beta != 0.0f) s = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(y + i), s);
    _mm256_storeu_ps(y + i, s);
  }
  for (; i < m; ++i) {
    const __m256 acc = row_acc(A + i * lda);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    y[i] = gemv_finish(_mm_cvtss_f32(h), alpha, beta, y + i);
  }
}

constexpr int kShortChunksMax = 16;  // rows up to 128 floats take the short path

template <int NC>
inline void gemv_short_dispatch(int64_t n_chunks, const float* A, int64_t lda, int64_t m, int64_t n,
                                const float* x, float alpha, float beta, float* y) {
  if constexpr (NC < kShortChunksMax) {
    if (n_chunks != NC) {
      gemv_short_dispatch<NC + 1>(n_chunks, A, lda, m, n, x, alpha, beta, y);
      return;
    }
  }
  gemv_short_v<NC>(A, lda, m, n, x, alpha, beta, y);
}

inline void gemv_v(const float* A, int64_t lda, int64_t m, int64_t n, const float* x, float alpha,
                   float beta, float* y) {
  if (n <= 0) {
    for (int64_t i = 0; i < m; ++i) y[i] = gemv_finish(0.0f, alpha, beta, y + i);
  } else if (n <= 8 * kShortChunksMax) {
    gemv_short_dispatch<1>((n + 7) / 8, A, lda, m, n, x, alpha, beta, y);
  } else {
    gemv_long_v(A, lda, m, n, x, alpha, beta, y);
  }
}

// y[0:n] += Σ a[i]·rows[i]: 4·W columns at a time stay in registers, in two accumulator sets
// (even and odd rows) so consecutive FMAs do not wait on each other.
inline void axpy_rows_v(const float* a, const float* rows, int64_t ld, int64_t m, int64_t n,
                        float* y) {
  constexpr int64_t W = V::W;
  int64_t c = 0;
  for (; c + 4 * W <= n; c += 4 * W) {
    auto y0 = V::load(y + c), y1 = V::load(y + c + W);
    auto y2 = V::load(y + c + 2 * W), y3 = V::load(y + c + 3 * W);
    auto z0 = V::zero(), z1 = V::zero(), z2 = V::zero(), z3 = V::zero();
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) {
      const float* p = rows + i * ld + c;
      const float* q = p + ld;
      const auto ap = V::set1(a[i]);
      const auto aq = V::set1(a[i + 1]);
      y0 = V::fma(ap, V::load(p), y0);
      y1 = V::fma(ap, V::load(p + W), y1);
      y2 = V::fma(ap, V::load(p + 2 * W), y2);
      y3 = V::fma(ap, V::load(p + 3 * W), y3);
      z0 = V::fma(aq, V::load(q), z0);
      z1 = V::fma(aq, V::load(q + W), z1);
      z2 = V::fma(aq, V::load(q + 2 * W), z2);
      z3 = V::fma(aq, V::load(q + 3 * W), z3);
    }
    if (i < m) {
      const float* p = rows + i * ld + c;
      const auto ap = V::set1(a[i]);
      y0 = V::fma(ap, V::load(p), y0);
      y1 = V::fma(ap, V::load(p + W), y1);
      y2 = V::fma(ap, V::load(p + 2 * W), y2);
      y3 = V::fma(ap, V::load(p + 3 * W), y3);
    }
    V::store(y + c, V::add(y0, z0));
    V::store(y + c + W, V::add(y1, z1));
    V::store(y + c + 2 * W, V::add(y2, z2));
    V::store(y + c + 3 * W, V::add(y3, z3));
  }
  for (; c < n; c += W) {
    const int64_t w = n - c < W ? n - c : W;
    auto y0 = V::load_n(y + c, w);
    auto z0 = V::zero();
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) {
      y0 = V::fma(V::set1(a[i]), V::load_n(rows + i * ld + c, w), y0);
      z0 = V::fma(V::set1(a[i + 1]), V::load_n(rows + (i + 1) * ld + c, w), z0);
    }
    if (i < m) y0 = V::fma(V::set1(a[i]), V::load_n(rows + i * ld + c, w), y0);
    V::store_n(y + c, V::add(y0, z0), w);
  }
}

// One tile of gemv_multi: R rows of A against C rows of X, R·C accumulators in registers
// (R + C loads per R·C FMAs). Each (row, t) sum is one accumulator reduced by hsum.
template <int R, int C>
inline void gemv_multi_tile(const float* A, int64_t lda, int64_t n, const float* X, int64_t ldx,
                            float alpha, float beta, float* Y, int64_t ldy) {
  constexpr int64_t W = V::W;
  typename V::R acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = V::zero();
  int64_t k = 0;
  for (; k + W <= n; k += W) {
    typename V::R a[R];
    for (int r = 0; r < R; ++r) a[r] = V::load(A + r * lda + k);
    for (int c = 0; c < C; ++c) {
      const auto xv = V::load(X + c * ldx + k);
      for (int r = 0; r < R; ++r) acc[r][c] = V::fma(a[r], xv, acc[r][c]);
    }
  }
  if (k < n) {
    const int64_t w = n - k;
    typename V::R a[R];
    for (int r = 0; r < R; ++r) a[r] = V::load_n(A + r * lda + k, w);
    for (int c = 0; c < C; ++c) {
      const auto xv = V::load_n(X + c * ldx + k, w);
      for (int r = 0; r < R; ++r) acc[r][c] = V::fma(a[r], xv, acc[r][c]);
    }
  }
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) {
      float* y = Y + c * ldy + r;
      *y = gemv_finish(V::hsum(acc[r][c]), alpha, beta, y);
    }
}

// R rows of A against all T rows of X, kMultiCols at a time: the R rows stay in L1/L2 after
// the first pass, so A streams from memory once.
template <int R>
inline void gemv_multi_rows(const float* A, int64_t lda, int64_t n, const float* X, int64_t ldx,
                            int64_t T, float alpha, float beta, float* Y, int64_t ldy) {
  constexpr int C = V::kMultiCols;
  int64_t t = 0;
  for (; t + C <= T; t += C)
    gemv_multi_tile<R, C>(A, lda, n, X + t * ldx, ldx, alpha, beta, Y + t * ldy, ldy);
  const int64_t rest = T - t;  // < C
  const float* Xt = X + t * ldx;
  float* Yt = Y + t * ldy;
  if constexpr (C > 1)
    if (rest == 1) gemv_multi_tile<R, 1>(A, lda, n, Xt, ldx, alpha, beta, Yt, ldy);
  if constexpr (C > 2)
    if (rest == 2) gemv_multi_tile<R, 2>(A, lda, n, Xt, ldx, alpha, beta, Yt, ldy);
  if constexpr (C > 3)
    if (rest == 3) gemv_multi_tile<R, 3>(A, lda, n, Xt, ldx, alpha, beta, Yt, ldy);
  if constexpr (C > 4)
    if (rest == 4) gemv_multi_tile<R, 4>(A, lda, n, Xt, ldx, alpha, beta, Yt, ldy);
  if constexpr (C > 5)
    if (rest == 5) gemv_multi_tile<R, 5>(A, lda, n, Xt, ldx, alpha, beta, Yt, ldy);
  static_assert(C <= 6, "add tail cases for wider tiles");
}

inline void gemv_multi_v(const float* A, int64_t lda, int64_t m, int64_t n, const float* X,
                         int64_t ldx, int64_t T, float alpha, float beta, float* Y, int64_t ldy) {
  constexpr int R = V::kMultiRows;
  int64_t i = 0;
  for (; i + R <= m; i += R)
    gemv_multi_rows<R>(A + i * lda, lda, n, X, ldx, T, alpha, beta, Y + i, ldy);
  for (; i < m; ++i) gemv_multi_rows<1>(A + i * lda, lda, n, X, ldx, T, alpha, beta, Y + i, ldy);
}

inline const Ops& make_ops() {
  static constexpr Ops table{dot_v,     axpy_v,     scale_v, sum_squares_v, max_v,
                             exp_sum_v, silu_mul_v, gemv_v,  axpy_rows_v,   gemv_multi_v};
  return table;
}
