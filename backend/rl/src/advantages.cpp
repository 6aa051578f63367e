#include "spindle/rl/advantages.h"

#include <cmath>

#include "spindle/core/error.h"

namespace spindle::rl {

GroupAdvantages group_advantages(std::span<const double> rewards, int32_t group_size,
                                 AdvantageMode mode, bool drop_uniform_groups) {
  SPINDLE_CHECK(group_size >= 1 && rewards.size() % size_t(group_size) == 0, invalid_argument,
                "group_advantages: {} rewards are not groups of {}", rewards.size(), group_size);
  GroupAdvantages out;
  out.advantages.assign(rewards.size(), 0.0f);
  out.keep.assign(rewards.size(), true);
  const size_t G = size_t(group_size);
  for (size_t g = 0; g < rewards.size(); g += G) {
    double mean = 0.0;
    for (size_t i = 0; i < G; ++i) mean += rewards[g + i];
    mean /= double(G);
    double var = 0.0;
    bool uniform = true;
    for (size_t i = 0; i < G; ++i) {
      var += (rewards[g + i] - mean) * (rewards[g + i] - mean);
      uniform = uniform && rewards[g + i] == rewards[g];
    }
    const double std = std::sqrt(var / double(G));
    if (uniform && drop_uniform_groups) {
      ++out.dropped_groups;
      for (size_t i = 0; i < G; ++i) out.keep[g + i] = false;
      continue;
    }
    for (size_t i = 0; i < G; ++i) {
      const double a = rewards[g + i] - mean;
      out.advantages[g + i] = float(mode == AdvantageMode::grpo ? a / (std + 1e-6) : a);
    }
  }
  return out;
}

float kl_k3(float policy_logprob, float base_logprob) {
  const double d = double(base_logprob) - double(policy_logprob);
  return float(std::expm1(d) - d);
}

double apply_kl_penalty(float advantage, float kl_coef, std::span<const float> policy,
                        std::span<const float> base, std::span<float> advantages) {
  SPINDLE_CHECK(policy.size() == base.size() && policy.size() == advantages.size(),
                invalid_argument, "apply_kl_penalty: {} policy, {} base logprobs for {} tokens",
                policy.size(), base.size(), advantages.size());
  double sum = 0.0;
  for (size_t t = 0; t < policy.size(); ++t) {
    const float k3 = kl_k3(policy[t], base[t]);
    sum += k3;
    advantages[t] = advantage - kl_coef * k3;
  }
  return sum;
}

}  // namespace spindle::rl
