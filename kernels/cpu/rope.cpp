#include "spindle/kernels/rope.h"

#include <algorithm>
#include <cmath>

#include "parallel.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {
namespace {

// Pairs per batch of cos/sin kept on the stack; a token's angles are computed once and applied
// to every head.
constexpr int64_t kPairChunk = 64;

// Rotates pair (a, b) by the angle whose cos/sin are c, s — llama2.c's expression order.
inline void rotate(float& a, float& b, float c, float s) {
  const float v0 = a;
  const float v1 = b;
  a = v0 * c - v1 * s;
  b = v0 * s + v1 * c;
}

}  // namespace

// Angle = float(pos)·inv_freq in float, then cosf/sinf: the precision llama2.c and HF use.
void rope(float* x, int64_t ld, int64_t T, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style, bool inverse) {
  SPINDLE_KERNEL_REQUIRE(T >= 0 && n_heads > 0 && head_dim > 0, "rope",
                         "T >= 0, n_heads > 0, head_dim > 0");
  SPINDLE_KERNEL_REQUIRE(head_dim % 2 == 0, "rope", "head_dim must be even");
  SPINDLE_KERNEL_REQUIRE(ld >= n_heads * head_dim, "rope", "ld >= n_heads * head_dim");
  SPINDLE_KERNEL_REQUIRE(style == RopeStyle::interleaved || style == RopeStyle::half, "rope",
                         "unknown RopeStyle");
  if (T == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && pos != nullptr && inv_freq != nullptr, "rope",
                         "x, pos and inv_freq must be non-null");
  for (int64_t t = 0; t < T; ++t)
    SPINDLE_KERNEL_REQUIRE(pos[t] >= 0, "rope", "positions must be >= 0");

  const int64_t half = head_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  cpu::parallel_for(T, cpu::worth_parallel(T * n_heads * head_dim * 2), cpu::Schedule::static_, [&](int64_t t) {
    float* xt = x + t * ld;
    const float p = static_cast<float>(pos[t]);
    float cos_v[kPairChunk];
    float sin_v[kPairChunk];
    for (int64_t i0 = 0; i0 < half; i0 += kPairChunk) {
      const int64_t n_pairs = std::min(kPairChunk, half - i0);
      for (int64_t i = 0; i < n_pairs; ++i) {
        const float angle = p * inv_freq[i0 + i];
        cos_v[i] = std::cos(angle);
        sin_v[i] = sign * std::sin(angle);
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* xh = xt + h * head_dim;
        if (style == RopeStyle::interleaved) {
          for (int64_t i = 0; i < n_pairs; ++i)
            rotate(xh[2 * (i0 + i)], xh[2 * (i0 + i) + 1], cos_v[i], sin_v[i]);
        } else {
          for (int64_t i = 0; i < n_pairs; ++i)
            rotate(xh[i0 + i], xh[i0 + i + half], cos_v[i], sin_v[i]);
        }
      }
    }
  });
}

}  // namespace spindle::kernels
