#pragma once
// Elementwise activations.

#include <cstdint>

namespace spindle::kernels {

// out[i] = silu(gate[i]) · up[i], silu(g) = g / (1 + e^-g). out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t count);

}  // namespace spindle::kernels
