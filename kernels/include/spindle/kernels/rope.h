#pragma once
// Rotary position embedding, in place, both conventions:
//   interleaved: pairs (2i, 2i+1)          (Meta / llama2.c checkpoints)
//   half:        pairs (i, i + head_dim/2) (Hugging Face rotate_half)
// Pair i at position p rotates by angle p · inv_freq[i], i in [0, head_dim/2).
// The engine keeps one internal layout (half); interleaved exists for formats and tests.

#include <cstdint>

namespace spindle::kernels {

enum class RopeStyle : uint8_t { interleaved, half };

// x: [T, n_heads, head_dim] with row stride ld (elements between tokens, ld >= n_heads·head_dim).
// pos: [T] absolute positions. inv_freq: [head_dim/2]. head_dim must be even.
// inverse = true rotates by the negative angle (the transpose; the backward of rope).
void rope(float* x, int64_t ld, int64_t T, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style, bool inverse = false);

}  // namespace spindle::kernels
