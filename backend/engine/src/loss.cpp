// Training losses (loss.h). Each token's term and its derivative w.r.t. the model's log p are
// computed in double and rounded once to float. The derivatives are exact for the formulas in
// loss.h:
//   cross_entropy        ∂/∂log p = −w
//   importance_sampling  ∂/∂log p = −w·ρ·A                       (∂ρ/∂log p = ρ)
//   ppo                  −w·ρ·A where the unclipped term is the min, else 0 (the clipped term
//                        is constant in log p once ρ is outside [lo, hi])
//   cispo                −w·clip(ρ)·A                              (clip(ρ) is stop-gradient)
//   dro                  −w·(A − β·(log p − q))

#include "spindle/engine/loss.h"

#include <algorithm>
#include <cmath>

#include "spindle/core/error.h"

namespace spindle::engine {
namespace {

// exp(80) ≈ 5.5e34 still fits a float, so ρ·A stays finite for |A| up to ~6e3. The clamp is an
// overflow guard for degenerate inputs (log p − q beyond ±80 means the sampler and the model
// disagree by a factor of e^80), not part of the loss: beyond it ρ is held at the bound while
// the derivative keeps the ρ-proportional form evaluated at that bound.
constexpr double kMaxLogRatio = 80.0;

double ratio(double logp, double q) {
  return std::exp(std::clamp(logp - q, -kMaxLogRatio, kMaxLogRatio));
}

bool needs_sampler_fields(LossFn fn) {
  return fn != LossFn::cross_entropy;
}

template <class T>
void check_finite(std::span<const T> values, const char* field, size_t datum_index, LossFn fn) {
  for (size_t j = 0; j < values.size(); ++j) {
    SPINDLE_CHECK(std::isfinite(double(values[j])), invalid_argument,
                  "datum {}: {}[{}] = {} is not finite (loss '{}')", datum_index, field, j,
                  values[j], loss_fn_name(fn));
  }
}

}  // namespace

const char* loss_fn_name(LossFn fn) {
  switch (fn) {
    case LossFn::cross_entropy:
      return "cross_entropy";
    case LossFn::importance_sampling:
      return "importance_sampling";
    case LossFn::ppo:
      return "ppo";
    case LossFn::cispo:
      return "cispo";
    case LossFn::dro:
      return "dro";
  }
  return "unknown";
}

std::optional<LossFn> loss_fn_from_name(std::string_view name) {
  for (LossFn fn : {LossFn::cross_entropy, LossFn::importance_sampling, LossFn::ppo, LossFn::cispo,
                    LossFn::dro}) {
    if (name == loss_fn_name(fn)) return fn;
  }
  return std::nullopt;
}

void LossConfig::validate() const {
  SPINDLE_CHECK(
      std::isfinite(clip_low_threshold) && clip_low_threshold > 0.0f && clip_low_threshold <= 1.0f,
      invalid_argument, "loss config: clip_low_threshold must be in (0, 1], got {}",
      clip_low_threshold);
  SPINDLE_CHECK(std::isfinite(clip_high_threshold) && clip_high_threshold >= 1.0f, invalid_argument,
                "loss config: clip_high_threshold must be finite and >= 1, got {}",
                clip_high_threshold);
  SPINDLE_CHECK(std::isfinite(beta) && beta >= 0.0f, invalid_argument,
                "loss config: beta must be finite and >= 0, got {}", beta);
}

void validate_loss_inputs(LossFn fn, const LossInputs& in, size_t datum_index) {
  const size_t n = in.target_tokens.size();
  const char* name = loss_fn_name(fn);
  // An empty datum (no target tokens) is valid and contributes nothing.
  auto check_length = [&](size_t size, const char* field, bool required) {
    if (size == 0 && n > 0) {
      SPINDLE_CHECK(!required, invalid_argument,
                    "datum {}: loss '{}' requires '{}' (one per target token, {} expected), "
                    "but it is missing",
                    datum_index, name, field, n);
      return;
    }
    SPINDLE_CHECK(size == n, invalid_argument,
                  "datum {}: '{}' has {} entries but there are {} target tokens (loss '{}')",
                  datum_index, field, size, n, name);
  };
  check_length(in.weights.size(), "weights", /*required=*/false);
  check_length(in.logprobs.size(), "logprobs", needs_sampler_fields(fn));
  check_length(in.advantages.size(), "advantages", needs_sampler_fields(fn));

  for (size_t j = 0; j < n; ++j) {
    SPINDLE_CHECK(in.target_tokens[j] >= 0, invalid_argument,
                  "datum {}: target_tokens[{}] = {} is negative", datum_index, j,
                  in.target_tokens[j]);
  }
  check_finite(in.weights, "weights", datum_index, fn);
  check_finite(in.logprobs, "logprobs", datum_index, fn);
  check_finite(in.advantages, "advantages", datum_index, fn);
  for (size_t j = 0; j < in.weights.size(); ++j) {
    SPINDLE_CHECK(in.weights[j] >= 0.0f, invalid_argument,
                  "datum {}: weights[{}] = {} is negative (weights must be >= 0)", datum_index, j,
                  in.weights[j]);
  }
}

TokenLoss token_loss(LossFn fn, const LossConfig& config, float logp, float weight, float q_logprob,
                     float advantage) {
  const double lp = logp;
  const double w = weight;
  const double q = q_logprob;
  const double a = advantage;
  const double lo = config.clip_low_threshold;
  const double hi = config.clip_high_threshold;
  double loss = 0.0;
  double grad = 0.0;
  bool clipped = false;
  switch (fn) {
    case LossFn::cross_entropy:
      loss = -w * lp;
      grad = -w;
      break;
    case LossFn::importance_sampling: {
      const double rho = ratio(lp, q);
      loss = -w * rho * a;
      grad = -w * rho * a;
      break;
    }
    case LossFn::ppo: {
      const double rho = ratio(lp, q);
      const double unclipped = rho * a;
      const double clipped_term = std::clamp(rho, lo, hi) * a;
      clipped = rho < lo || rho > hi;
      if (unclipped <= clipped_term) {
        loss = -w * unclipped;
        grad = -w * unclipped;
      } else {
        loss = -w * clipped_term;
        grad = 0.0;
      }
      break;
    }
    case LossFn::cispo: {
      const double rho = ratio(lp, q);
      const double c = std::clamp(rho, lo, hi);
      clipped = rho < lo || rho > hi;
      loss = -w * c * lp * a;
      grad = -w * c * a;
      break;
    }
    case LossFn::dro: {
      const double beta = config.beta;
      const double d = lp - q;
      loss = -w * (lp * a - 0.5 * beta * d * d);
      grad = -w * (a - beta * d);
      break;
    }
  }
  return TokenLoss{.loss = float(loss), .dloss_dlogp = float(grad), .clipped = clipped};
}

void LossMetrics::add(const LossMetrics& other) {
  loss += other.loss;
  n_tokens += other.n_tokens;
  n_clipped += other.n_clipped;
}

}  // namespace spindle::engine
