#pragma once
// Elementwise activations.

#include <cstdint>

namespace spindle::kernels {

// out[i] = silu(gate[i]) · up[i], silu(g) = g / (1 + e^-g). out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t count);

// Backward of swiglu: d_gate = d_out·up·silu'(gate), d_up = d_out·silu(gate), overwritten.
// silu'(g) = σ(g)·(1 + g·(1 − σ(g))). Outputs must not alias the inputs.
void swiglu_backward(const float* gate, const float* up, const float* d_out, float* d_gate,
                     float* d_up, int64_t count);

}  // namespace spindle::kernels
