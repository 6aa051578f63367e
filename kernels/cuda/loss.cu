// Log-softmax, target log-probs, per-token losses and their backward on the GPU (loss.h).
//
// Row kernels: one thread block per row (grid-stride over rows), one pass of online max/sum
// (each thread keeps its running max m and Σ e^(x−m), combined through a fixed block tree),
// then a pass that writes. Everything is fp32 except token_losses, which evaluates
// engine/loss.cpp token_loss()'s expressions in double in the same order (no FMA contraction:
// __dmul_rn/__dadd_rn) and rounds once to float, like the CPU.

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/loss.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::block_max_sum;
using detail::block_sum;
using detail::from_f32;
using detail::MaxSum;
using detail::online_add;
using detail::to_f32;

int threads_for_vocab(int64_t vocab) {
  return vocab >= 8192 ? 1024 : 256;
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < 65535 ? rows : 65535);
}

template <class T>
__device__ MaxSum row_max_sum(const T* xr, int64_t vocab) {
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) online_add(acc, to_f32(xr[j]));
  return block_max_sum(acc);
}

// y may alias x (T = float): every read of the row precedes the block-wide combine.
template <class T>
__global__ void __launch_bounds__(1024)
    log_softmax_kernel(const T* x, int64_t ld_x, float* y, int64_t ld_y, int64_t rows,
                       int64_t vocab) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * ld_x;
    const MaxSum ms = row_max_sum(xr, vocab);
    const float log_sum = logf(ms.s);
    float* yr = y + r * ld_y;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      yr[j] = (to_f32(xr[j]) - ms.m) - log_sum;
    }
  }
}

// A target outside [0, vocab) yields NaN (the contract is the caller's; nothing aborts).
template <class T>
__global__ void __launch_bounds__(1024)
    target_logprobs_kernel(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                           const int32_t* targets, float* logp, float* lse, float* entropy) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * ld;
    const MaxSum ms = row_max_sum(xr, vocab);
    const float log_sum = logf(ms.s);
    if (threadIdx.x == 0) {
      const int32_t t = targets[r];
      logp[r] = (t >= 0 && t < vocab) ? (to_f32(xr[t]) - ms.m) - log_sum : NAN;
      if (lse != nullptr) lse[r] = ms.m + log_sum;
    }
    if (entropy != nullptr) {
      // H = −Σ p·log p with log p = (x − m) − log Σ; p = 0 terms (x = −inf) add nothing.
      float acc = 0.0f;
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        const float z = (to_f32(xr[j]) - ms.m) - log_sum;
        const float p = expf(z);
        if (p > 0.0f) acc += p * z;
      }
      acc = block_sum(acc);
      if (threadIdx.x == 0) entropy[r] = -acc;
    }
  }
}

// std::clamp(v, lo, hi) for lo <= hi.
__device__ __forceinline__ double clamp_d(double v, double lo, double hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

// engine/loss.cpp: ρ = exp(clamp(log p − q, −80, 80)).
__device__ __forceinline__ double ratio(double lp, double q) {
  constexpr double kMaxLogRatio = 80.0;
  return exp(clamp_d(__dsub_rn(lp, q), -kMaxLogRatio, kMaxLogRatio));
}

__global__ void token_losses_kernel(LossParams params, const float* logp, const float* weight,
                                    const float* q_in, const float* adv, int64_t n, float* loss_out,
                                    float* grad_out, uint8_t* clipped_out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double lp = logp[i];
    const double w = weight != nullptr ? double(weight[i]) : 1.0;
    const double q = q_in != nullptr ? double(q_in[i]) : 0.0;
    const double a = adv != nullptr ? double(adv[i]) : 0.0;
    const double lo = params.clip_low;
    const double hi = params.clip_high;
    const double nw = -w;
    double loss = 0.0;
    double grad = 0.0;
    bool clipped = false;
    switch (params.kind) {
      case LossKind::cross_entropy:
        loss = __dmul_rn(nw, lp);
        grad = nw;
        break;
      case LossKind::importance_sampling: {
        const double rho = ratio(lp, q);
        loss = __dmul_rn(__dmul_rn(nw, rho), a);
        grad = loss;
        break;
      }
      case LossKind::ppo: {
        const double rho = ratio(lp, q);
        const double unclipped = __dmul_rn(rho, a);
        const double clipped_term = __dmul_rn(clamp_d(rho, lo, hi), a);
        clipped = rho < lo || rho > hi;
        if (unclipped <= clipped_term) {
          loss = __dmul_rn(nw, unclipped);
          grad = loss;
        } else {
          loss = __dmul_rn(nw, clipped_term);
          grad = 0.0;
        }
        break;
      }
      case LossKind::cispo: {
        const double rho = ratio(lp, q);
        const double c = clamp_d(rho, lo, hi);  // stop-gradient: constant in log p
        clipped = rho < lo || rho > hi;
        const double nwc = __dmul_rn(nw, c);
        loss = __dmul_rn(__dmul_rn(nwc, lp), a);
        grad = __dmul_rn(nwc, a);
        break;
      }
      case LossKind::dro: {
        const double beta = params.beta;
        const double d = __dsub_rn(lp, q);
        const double penalty = __dmul_rn(__dmul_rn(__dmul_rn(0.5, beta), d), d);
        loss = __dmul_rn(nw, __dsub_rn(__dmul_rn(lp, a), penalty));
        grad = __dmul_rn(nw, __dsub_rn(a, __dmul_rn(beta, d)));
        break;
      }
    }
    loss_out[i] = static_cast<float>(loss);
    grad_out[i] = static_cast<float>(grad);
    if (clipped_out != nullptr) clipped_out[i] = clipped ? 1 : 0;
  }
}

// dlogits may alias logits (same T): each element is read and written by one thread.
template <class T>
__global__ void __launch_bounds__(1024)
    target_logprobs_backward_kernel(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                                    const int32_t* targets, const float* lse,
                                    const float* dloss_dlogp, T* dlogits, int64_t ld_d) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * ld;
    T* dr = dlogits + r * ld_d;
    const float g = dloss_dlogp[r];
    if (g == 0.0f) {
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) dr[j] = from_f32<T>(0.0f);
      continue;
    }
    const float l = lse[r];
    const int64_t t = targets[r];
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float p = expf(to_f32(xr[j]) - l);
      dr[j] = from_f32<T>(g * ((j == t ? 1.0f : 0.0f) - p));
    }
  }
}

}  // namespace

template <class T>
void log_softmax(const T* x, int64_t ld_x, float* y, int64_t ld_y, int64_t rows, int64_t vocab,
                 cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::log_softmax";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && vocab > 0, kKernel, "rows >= 0 and vocab > 0");
  SPINDLE_KERNEL_REQUIRE(ld_x >= vocab && ld_y >= vocab, kKernel,
                         "ld_x >= vocab and ld_y >= vocab");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && y != nullptr, kKernel, "x and y must be non-null");
  log_softmax_kernel<T>
      <<<row_blocks(rows), threads_for_vocab(vocab), 0, stream>>>(x, ld_x, y, ld_y, rows, vocab);
  check_launch(kKernel);
}

template <class T>
void target_logprobs(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                     const int32_t* targets, float* logp, float* lse, float* entropy,
                     cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::target_logprobs";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && vocab > 0, kKernel, "rows >= 0 and vocab > 0");
  SPINDLE_KERNEL_REQUIRE(vocab <= INT32_MAX, kKernel, "vocab must fit int32");
  SPINDLE_KERNEL_REQUIRE(ld >= vocab, kKernel, "ld >= vocab");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(logits != nullptr && targets != nullptr && logp != nullptr, kKernel,
                         "logits, targets and logp must be non-null");
  target_logprobs_kernel<T><<<row_blocks(rows), threads_for_vocab(vocab), 0, stream>>>(
      logits, ld, rows, vocab, targets, logp, lse, entropy);
  check_launch(kKernel);
}

void token_losses(const LossParams& params, const float* logp, const float* weight, const float* q,
                  const float* adv, int64_t n, float* loss, float* dloss_dlogp, uint8_t* clipped,
                  cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::token_losses";
  SPINDLE_KERNEL_REQUIRE(n >= 0, kKernel, "n >= 0");
  SPINDLE_KERNEL_REQUIRE(static_cast<uint8_t>(params.kind) <= static_cast<uint8_t>(LossKind::dro),
                         kKernel, "unknown LossKind");
  if (n == 0) return;
  SPINDLE_KERNEL_REQUIRE(logp != nullptr && loss != nullptr && dloss_dlogp != nullptr, kKernel,
                         "logp, loss and dloss_dlogp must be non-null");
  SPINDLE_KERNEL_REQUIRE(params.kind == LossKind::cross_entropy || (q != nullptr && adv != nullptr),
                         kKernel, "q and adv are required by every loss but cross_entropy");
  constexpr int kThreads = 256;
  token_losses_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
      params, logp, weight, q, adv, n, loss, dloss_dlogp, clipped);
  check_launch(kKernel);
}

template <class T>
void target_logprobs_backward(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                              const int32_t* targets, const float* lse, const float* dloss_dlogp,
                              T* dlogits, int64_t ld_d, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::target_logprobs_backward";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && vocab > 0, kKernel, "rows >= 0 and vocab > 0");
  SPINDLE_KERNEL_REQUIRE(ld >= vocab && ld_d >= vocab, kKernel, "ld >= vocab and ld_d >= vocab");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(logits != nullptr && targets != nullptr && lse != nullptr &&
                             dloss_dlogp != nullptr && dlogits != nullptr,
                         kKernel, "logits, targets, lse, dloss_dlogp and dlogits must be non-null");
  SPINDLE_KERNEL_REQUIRE(
      static_cast<const void*>(dlogits) != static_cast<const void*>(logits) || ld_d == ld, kKernel,
      "in place (dlogits == logits) needs ld_d == ld");
  target_logprobs_backward_kernel<T><<<row_blocks(rows), threads_for_vocab(vocab), 0, stream>>>(
      logits, ld, rows, vocab, targets, lse, dloss_dlogp, dlogits, ld_d);
  check_launch(kKernel);
}

#define SPINDLE_INSTANTIATE_LOSS(T)                                                              \
  template void log_softmax<T>(const T*, int64_t, float*, int64_t, int64_t, int64_t,             \
                               cudaStream_t);                                                    \
  template void target_logprobs<T>(const T*, int64_t, int64_t, int64_t, const int32_t*, float*,  \
                                   float*, float*, cudaStream_t);                                \
  template void target_logprobs_backward<T>(const T*, int64_t, int64_t, int64_t, const int32_t*, \
                                            const float*, const float*, T*, int64_t,             \
                                            cudaStream_t);
SPINDLE_INSTANTIATE_LOSS(float)
SPINDLE_INSTANTIATE_LOSS(bf16)
#undef SPINDLE_INSTANTIATE_LOSS

}  // namespace spindle::kernels::cuda
