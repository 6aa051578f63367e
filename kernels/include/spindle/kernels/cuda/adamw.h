#pragma once
// Fused AdamW over all tensors of one adapter (semantics of engine/optimizer.h): one launch
// updates every tensor; the optional global grad-norm clip is one reduction launch before it.

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda {

struct AdamWHyper {
  float learning_rate = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-12f;
  float weight_decay = 0.0f;
  float grad_clip_norm = 0.0f;  // 0 = off
  int64_t step = 1;             // 1-based step being taken (bias correction)
};

// One tensor: `count` fp32 elements of param, grad, m, v (all device).
struct AdamWTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t count = 0;
};

// tensors: [n_tensors] device array. Updates every element of every tensor:
//   g ← grad·min(1, clip/‖grad‖₂) (‖·‖ over all tensors; clip off when 0)
//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   p ← p − lr·wd·p − lr·(m/(1−β1ᵗ)) / (√(v/(1−β2ᵗ)) + ε)
// grad_norm_out (device, 1 float, may be null) receives ‖grad‖₂ before clipping.
// `scratch` holds adamw_scratch_bytes(n_tensors) bytes of device memory (required for clipping
// or grad_norm_out). Whenever scratch is given the norm is computed, and a non-finite norm (a
// NaN or ±Inf gradient element) updates nothing: params and moments keep their values, and the
// caller (which reads grad_norm_out) refuses the step as the CPU AdamW does.
size_t adamw_scratch_bytes(int64_t n_tensors);
void adamw_step(const AdamWTensor* tensors, int64_t n_tensors, int64_t max_count,
                const AdamWHyper& hyper, float* grad_norm_out, void* scratch,
                cudaStream_t stream);

}  // namespace spindle::kernels::cuda
