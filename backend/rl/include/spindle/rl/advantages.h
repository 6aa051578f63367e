#pragma once
// Group advantages and the KL penalty of a GRPO step.
//
// Rewards come in groups (the G completions of one prompt). GRPO: A = (r − mean) / (std + ε),
// std the population std of the group, ε = 1e-6; Dr. GRPO: A = r − mean. A group whose rewards
// are all equal has A = 0 everywhere and teaches nothing; with drop_uniform_groups it is left
// out of the batch (DAPO's dynamic sampling without the resampling).
//
// KL to the base (the adapter switched off), k3 estimator per sampled token (Schulman):
// with δ = log p_base − log p_policy, k3 = exp(δ) − δ − 1 (>= 0, unbiased for KL(π‖base)).
// It is folded into the per-token advantages Tinker-cookbook style: A_t ← A − kl_coef · k3_t,
// so every loss gets the penalty without a loss-specific term.

#include <cstdint>
#include <span>
#include <vector>

#include "spindle/rl/config.h"

namespace spindle::rl {

struct GroupAdvantages {
  std::vector<float> advantages;  // one per completion (0 for dropped groups)
  std::vector<bool> keep;         // per completion: false when its group was dropped
  int64_t dropped_groups = 0;
};

// `rewards` holds consecutive groups of `group_size`. Throws invalid_argument when its size is
// not a multiple of group_size.
GroupAdvantages group_advantages(std::span<const double> rewards, int32_t group_size,
                                 AdvantageMode mode, bool drop_uniform_groups);

// k3 per token from the policy's and the base's log-probabilities of the sampled tokens.
float kl_k3(float policy_logprob, float base_logprob);

// advantages[t] = advantage − kl_coef · k3(policy[t], base[t]); returns Σ k3 (for metrics).
double apply_kl_penalty(float advantage, float kl_coef, std::span<const float> policy_logprobs,
                        std::span<const float> base_logprobs, std::span<float> advantages);

}  // namespace spindle::rl
