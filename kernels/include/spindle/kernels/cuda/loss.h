#pragma once
// Log-softmax, target log-prob gather and the per-token loss terms on the GPU. Logits are T
// (float or bf16); everything computed here is fp32.
//
// Loss semantics are engine/loss.h's (Tinker's five losses); the enum values mirror
// engine::LossFn so the engine can cast: 0 cross_entropy, 1 importance_sampling, 2 ppo,
// 3 cispo, 4 dro.

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda {

// y[r, :] = log_softmax(x[r, :]) (max-subtracted). x, y: row strides ld_x, ld_y.
template <class T>
void log_softmax(const T* x, int64_t ld_x, float* y, int64_t ld_y, int64_t rows, int64_t vocab,
                 cudaStream_t stream);

// For each row r: lse[r] = logsumexp(logits[r, :]), logp[r] = logits[r, targets[r]] − lse[r],
// and, if entropy is non-null, entropy[r] = −Σ p·log p. Outputs [rows] fp32 device; lse may be
// null. targets: [rows] device, in [0, vocab).
template <class T>
void target_logprobs(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                     const int32_t* targets, float* logp, float* lse, float* entropy,
                     cudaStream_t stream);

enum class LossKind : uint8_t { cross_entropy = 0, importance_sampling = 1, ppo = 2, cispo = 3,
                                dro = 4 };

struct LossParams {
  LossKind kind = LossKind::cross_entropy;
  float clip_low = 0.8f;   // ppo / cispo
  float clip_high = 1.2f;
  float beta = 0.05f;      // dro
};

// Per-token loss terms of engine/loss.h token_loss(): for i < n, from logp[i] and the optional
// weight[i] (null = 1), q[i] (sampler logprob) and adv[i] (null = absent; required by all but
// cross_entropy, the caller checks): loss[i], dloss_dlogp[i] and clipped[i] (1/0; may be null).
void token_losses(const LossParams& params, const float* logp, const float* weight,
                  const float* q, const float* adv, int64_t n, float* loss, float* dloss_dlogp,
                  uint8_t* clipped, cudaStream_t stream);

// Backward through log-softmax + gather for a row-chunk of logits:
//   dlogits[r, j] = g[r] · (1[j == targets[r]] − softmax(logits[r])_j)
// with g[r] = dloss_dlogp[r] (0 rows get zeros). lse from target_logprobs. dlogits row stride
// ld_d (may alias logits when T matches: in place).
template <class T>
void target_logprobs_backward(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                              const int32_t* targets, const float* lse, const float* dloss_dlogp,
                              T* dlogits, int64_t ld_d, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
