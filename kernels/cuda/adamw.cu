// Fused AdamW on the GPU (adamw.h). Two launches at most:
//   1. (clipping or grad_norm_out) adamw_norm: grid (kNormBlocks, y); each block writes a
//      double partial Σg² over its tensors, the last block to finish (threadfence + counter)
//      adds the partials in a fixed order and stores ‖g‖₂ and the clip scale in the scratch.
//   2. adamw_update: grid (x, y), grid-stride over each tensor.
// y = min(n_tensors, kMaxGridY): block row b takes tensors b, b + y, b + 2y, ... (a routed-expert
// model has more adapted tensors than a grid has rows: 72k at Qwen3-235B's shape). The grid is a
// function of n_tensors alone, so the norm's summation order is the same run to run.
// Each element is updated in double from the fp32 state and rounded once, with
// backend/engine/src/optimizer.cpp's expressions in its order and without FMA contraction
// (__dmul_rn/__dadd_rn/...), so an update matches the CPU AdamW given the same scale.

#include <cmath>
#include <cstddef>

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/adamw.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kNormBlocks = 8;         // partials per tensor
constexpr int64_t kMaxUpdateBlocks = 1024;  // per tensor
constexpr int64_t kMaxGridY = 65535;        // CUDA's grid.y limit

// Device scratch: the counter must be 0 when the norm launch starts (set by a memset before it;
// the last block also resets it).
struct NormScratch {
  unsigned int counter;
  unsigned int pad;
  double scale;       // min(1, clip/‖g‖) (1 when clipping is off)
  double partial[1];  // [n_tensors · kNormBlocks]
};

struct Coeffs {
  double b1, one_minus_b1, b2, one_minus_b2, bc1, bc2, lr, decay, eps;
};

__global__ void adamw_norm_kernel(const AdamWTensor* tensors, int64_t n_tensors, float clip,
                                  float* grad_norm_out, NormScratch* s) {
  __shared__ bool last;
  double acc = 0.0;
  for (int64_t ti = blockIdx.y; ti < n_tensors; ti += gridDim.y) {
    const AdamWTensor t = tensors[ti];
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < t.count;
         i += int64_t{gridDim.x} * blockDim.x) {
      const double g = t.grad[i];
      acc += g * g;
    }
  }
  acc = detail::block_sum(acc);
  if (threadIdx.x == 0) {
    s->partial[blockIdx.y * gridDim.x + blockIdx.x] = acc;
    __threadfence();  // the partial is visible before the counter says so
    const unsigned done = atomicAdd(&s->counter, 1u);
    last = done == gridDim.x * gridDim.y - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t n = int64_t{gridDim.x} * gridDim.y;
  const volatile double* partial = s->partial;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += partial[i];
  sum = detail::block_sum(sum);
  if (threadIdx.x == 0) {
    const double norm = sqrt(sum);
    // A non-finite norm (a NaN or ±Inf gradient) leaves NaN: the update then changes nothing.
    s->scale = !isfinite(norm)                        ? __longlong_as_double(0x7ff8000000000000LL)
               : (clip > 0.0f && norm > double(clip)) ? double(clip) / norm
                                                      : 1.0;
    if (grad_norm_out != nullptr) *grad_norm_out = static_cast<float>(norm);
    s->counter = 0;
  }
}

// One tensor's update, grid-stride over its elements in blockIdx.x.
__device__ void update_tensor(const AdamWTensor& t, double scale, const Coeffs& c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < t.count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double gi = __dmul_rn(double(t.grad[i]), scale);
    const float m = static_cast<float>(
        __dadd_rn(__dmul_rn(c.b1, double(t.m[i])), __dmul_rn(c.one_minus_b1, gi)));
    const float v = static_cast<float>(
        __dadd_rn(__dmul_rn(c.b2, double(t.v[i])), __dmul_rn(__dmul_rn(c.one_minus_b2, gi), gi)));
    t.m[i] = m;
    t.v[i] = v;
    const double m_hat = __ddiv_rn(double(m), c.bc1);
    const double v_hat = __ddiv_rn(double(v), c.bc2);
    const double wi = t.param[i];
    const double step = __ddiv_rn(__dmul_rn(c.lr, m_hat), __dadd_rn(__dsqrt_rn(v_hat), c.eps));
    t.param[i] = static_cast<float>(__dsub_rn(__dsub_rn(wi, __dmul_rn(c.decay, wi)), step));
  }
}

// scale: device double (the norm launch's), or null for 1.
__global__ void adamw_update_kernel(const AdamWTensor* tensors, int64_t n_tensors,
                                    const double* scale_ptr, Coeffs c) {
  const double scale = scale_ptr != nullptr ? *scale_ptr : 1.0;
  if (!isfinite(scale)) return;  // a non-finite gradient norm: nothing is updated
  for (int64_t ti = blockIdx.y; ti < n_tensors; ti += gridDim.y) {
    update_tensor(tensors[ti], scale, c);
  }
}

}  // namespace

size_t adamw_scratch_bytes(int64_t n_tensors) {
  const int64_t n = n_tensors < 1 ? 1 : n_tensors;
  return offsetof(NormScratch, partial) + sizeof(double) * static_cast<size_t>(n) * kNormBlocks;
}

// With the norm launch (scratch given, as the trainer always does), a non-finite ‖grad‖ (some
// gradient NaN or ±Inf) updates nothing and grad_norm_out receives it: the caller refuses the
// step, as the CPU AdamW does. Without scratch (no clipping, no grad_norm_out) nothing is checked.
void adamw_step(const AdamWTensor* tensors, int64_t n_tensors, int64_t max_count,
                const AdamWHyper& hyper, float* grad_norm_out, void* scratch, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::adamw_step";
  SPINDLE_KERNEL_REQUIRE(n_tensors >= 0, kKernel, "n_tensors >= 0");
  SPINDLE_KERNEL_REQUIRE(max_count >= 0, kKernel, "max_count >= 0");
  SPINDLE_KERNEL_REQUIRE(hyper.step >= 1, kKernel, "step must be >= 1 (1-based)");
  SPINDLE_KERNEL_REQUIRE(
      hyper.beta1 >= 0.0f && hyper.beta1 < 1.0f && hyper.beta2 >= 0.0f && hyper.beta2 < 1.0f,
      kKernel, "beta1 and beta2 must be in [0, 1)");
  SPINDLE_KERNEL_REQUIRE(hyper.eps > 0.0f && hyper.learning_rate >= 0.0f &&
                             hyper.weight_decay >= 0.0f && hyper.grad_clip_norm >= 0.0f,
                         kKernel, "eps > 0, learning_rate, weight_decay, grad_clip_norm >= 0");
  if (n_tensors == 0) {
    if (grad_norm_out != nullptr) {
      check(cudaMemsetAsync(grad_norm_out, 0, sizeof(float), stream), "cudaMemsetAsync");
    }
    return;
  }
  SPINDLE_KERNEL_REQUIRE(tensors != nullptr, kKernel, "tensors must be non-null");
  SPINDLE_KERNEL_REQUIRE(
      scratch != nullptr || (hyper.grad_clip_norm == 0.0f && grad_norm_out == nullptr), kKernel,
      "scratch (adamw_scratch_bytes) is required for clipping or grad_norm_out");
  const bool need_norm = scratch != nullptr;  // the norm (and the non-finite check) runs
  auto* s = static_cast<NormScratch*>(scratch);
  const auto grid_y = static_cast<unsigned>(n_tensors < kMaxGridY ? n_tensors : kMaxGridY);
  if (need_norm) {
    check(cudaMemsetAsync(&s->counter, 0, sizeof(unsigned int), stream), "cudaMemsetAsync");
    adamw_norm_kernel<<<dim3(kNormBlocks, grid_y), kThreads, 0, stream>>>(
        tensors, n_tensors, hyper.grad_clip_norm, grad_norm_out, s);
    check_launch("cuda::adamw_step (norm)");
  }
  Coeffs c{};
  c.b1 = hyper.beta1;
  c.one_minus_b1 = 1.0 - c.b1;
  c.b2 = hyper.beta2;
  c.one_minus_b2 = 1.0 - c.b2;
  c.bc1 = 1.0 - std::pow(c.b1, double(hyper.step));
  c.bc2 = 1.0 - std::pow(c.b2, double(hyper.step));
  c.lr = hyper.learning_rate;
  c.decay = c.lr * double(hyper.weight_decay);
  c.eps = hyper.eps;
  const int64_t bx_wanted = (max_count + kThreads - 1) / kThreads;
  const unsigned bx = static_cast<unsigned>(
      bx_wanted < 1 ? 1 : (bx_wanted > kMaxUpdateBlocks ? kMaxUpdateBlocks : bx_wanted));
  adamw_update_kernel<<<dim3(bx, grid_y), kThreads, 0, stream>>>(
      tensors, n_tensors, need_norm ? &s->scale : nullptr, c);
  check_launch("cuda::adamw_step (update)");
}

}  // namespace spindle::kernels::cuda
