#pragma once
// Training losses, per token and summed over tokens, as Tinker defines them. For a target
// token with model log-probability log p, sampler log-probability q (`logprobs`), advantage A
// and weight w, with ρ = exp(log p − q):
//   cross_entropy        −w·log p
//   importance_sampling  −w·ρ·A
//   ppo                  −w·min(ρ·A, clip(ρ, lo, hi)·A)       lo, hi = clip_low/high_threshold
//   cispo                −w·sg(clip(ρ, lo, hi))·log p·A        sg = stop-gradient
//   dro                  −w·[log p·A − ½·β·(log p − q)²]
// The weight w (default 1) masks tokens for every loss (prompt tokens carry 0).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::engine {

enum class LossFn : uint8_t { cross_entropy, importance_sampling, ppo, cispo, dro };

const char* loss_fn_name(LossFn fn);
std::optional<LossFn> loss_fn_from_name(std::string_view name);

struct LossConfig {
  float clip_low_threshold = 0.8f;
  float clip_high_threshold = 1.2f;
  float beta = 0.05f;  // dro
  // Throws invalid_argument naming the field (0 < lo <= 1 <= hi, beta >= 0, all finite).
  void validate() const;
};

// One datum's loss inputs, aligned with its target tokens. Empty vectors mean "absent".
struct LossInputs {
  std::span<const int32_t> target_tokens;
  std::span<const float> weights;     // optional for every loss (default 1)
  std::span<const float> logprobs;    // q: required by importance_sampling, ppo, cispo, dro
  std::span<const float> advantages;  // required by importance_sampling, ppo, cispo, dro
};

// Throws invalid_argument naming the datum, the field and the sizes when a required field is
// missing or lengths differ, or a value is not finite.
void validate_loss_inputs(LossFn fn, const LossInputs& in, size_t datum_index);

struct TokenLoss {
  float loss = 0.0f;          // this token's term
  float dloss_dlogp = 0.0f;   // ∂loss/∂log p (everything else held fixed)
  bool clipped = false;       // ppo / cispo: ρ outside [lo, hi]
};

TokenLoss token_loss(LossFn fn, const LossConfig& config, float logp, float weight,
                     float q_logprob, float advantage);

struct LossMetrics {
  double loss = 0.0;        // Σ over tokens with weight != 0
  int64_t n_tokens = 0;     // tokens with weight != 0
  int64_t n_clipped = 0;
  double clip_fraction() const { return n_tokens ? double(n_clipped) / double(n_tokens) : 0.0; }
  void add(const LossMetrics& other);
};

}  // namespace spindle::engine
