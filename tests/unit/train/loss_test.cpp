// Training losses: values against hand computations, derivatives against central finite
// differences over log p, the clip branches of ppo/cispo, dro's quadratic term, masking, and
// input validation.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "spindle/core/error.h"
#include "spindle/engine/loss.h"

namespace spindle::engine {
namespace {

constexpr LossFn kAllFns[] = {LossFn::cross_entropy, LossFn::importance_sampling, LossFn::ppo,
                              LossFn::cispo, LossFn::dro};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    return e.what();
  }
  return "<no error>";
}

// Central difference of token_loss's loss over log p, in double. The inputs are floats, so the
// step actually taken is measured after rounding. `shift_q` moves q with log p (holding ρ
// fixed), which is how cispo's stop-gradient derivative is probed inside the clip range.
double finite_difference(LossFn fn, const LossConfig& c, float lp, float w, float q, float a,
                         bool shift_q = false) {
  const double h = 1e-2;
  const float lp_p = float(lp + h), lp_m = float(lp - h);
  const float q_p = shift_q ? float(q + (double(lp_p) - lp)) : q;
  const float q_m = shift_q ? float(q + (double(lp_m) - lp)) : q;
  const double up = token_loss(fn, c, lp_p, w, q_p, a).loss;
  const double down = token_loss(fn, c, lp_m, w, q_m, a).loss;
  return (up - down) / (double(lp_p) - double(lp_m));
}

void expect_derivative(LossFn fn, const LossConfig& c, float lp, float w, float q, float a,
                       bool shift_q = false) {
  const double fd = finite_difference(fn, c, lp, w, q, a, shift_q);
  const double d = token_loss(fn, c, lp, w, q, a).dloss_dlogp;
  EXPECT_NEAR(d, fd, 1e-3 * std::max(1.0, std::abs(fd)))
      << loss_fn_name(fn) << " lp=" << lp << " q=" << q << " A=" << a << " w=" << w;
}

TEST(Loss, NamesRoundTrip) {
  for (LossFn fn : kAllFns) EXPECT_EQ(loss_fn_from_name(loss_fn_name(fn)), fn);
  EXPECT_STREQ(loss_fn_name(LossFn::importance_sampling), "importance_sampling");
  EXPECT_FALSE(loss_fn_from_name("PPO").has_value());
  EXPECT_FALSE(loss_fn_from_name("").has_value());
}

TEST(Loss, CrossEntropyValueAndDerivative) {
  const LossConfig c;
  const TokenLoss t = token_loss(LossFn::cross_entropy, c, -1.5f, 0.7f, 0.0f, 0.0f);
  EXPECT_NEAR(t.loss, 0.7 * 1.5, 1e-6);
  EXPECT_FLOAT_EQ(t.dloss_dlogp, -0.7f);
  EXPECT_FALSE(t.clipped);
  expect_derivative(LossFn::cross_entropy, c, -1.5f, 0.7f, 0.0f, 0.0f);
}

TEST(Loss, ImportanceSamplingValueAndDerivative) {
  const LossConfig c;
  const double rho = std::exp(double(-1.0f) - double(-1.2f));
  const TokenLoss t = token_loss(LossFn::importance_sampling, c, -1.0f, 2.0f, -1.2f, 0.5f);
  EXPECT_NEAR(t.loss, -2.0 * rho * 0.5, 1e-6);
  EXPECT_NEAR(t.dloss_dlogp, -2.0 * rho * 0.5, 1e-6);
  expect_derivative(LossFn::importance_sampling, c, -1.0f, 2.0f, -1.2f, 0.5f);
  expect_derivative(LossFn::importance_sampling, c, -3.0f, 1.0f, -1.0f, -1.7f);
}

struct ClipCase {
  float log_ratio;  // log p − q
  float advantage;
  bool clipped;
  bool clipped_branch;  // ppo: the min picks the clipped term (gradient 0)
};

TEST(Loss, PpoBothSidesOfTheClipRange) {
  const LossConfig c;  // [0.8, 1.2]
  const double lo = c.clip_low_threshold, hi = c.clip_high_threshold;
  const ClipCase cases[] = {
      {0.1f, 1.0f, false, false},    // ρ ≈ 1.105 inside
      {-0.1f, -2.0f, false, false},  // ρ ≈ 0.905 inside
      {0.3f, 1.0f, true, true},      // ρ ≈ 1.35 > hi, A > 0: clipped term is the min
      {0.3f, -1.0f, true, false},    // ρ > hi, A < 0: unclipped is the min
      {-0.3f, 1.0f, true, false},    // ρ ≈ 0.74 < lo, A > 0: unclipped is the min
      {-0.3f, -1.0f, true, true},    // ρ < lo, A < 0: clipped term is the min
  };
  const float q = -0.7f, w = 1.5f;
  for (const ClipCase& k : cases) {
    const float lp = q + k.log_ratio;
    const double rho = std::exp(double(lp) - double(q));
    const double unclipped = rho * k.advantage;
    const double clipped_term = std::clamp(rho, lo, hi) * k.advantage;
    const TokenLoss t = token_loss(LossFn::ppo, c, lp, w, q, k.advantage);
    EXPECT_EQ(t.clipped, k.clipped) << k.log_ratio << " " << k.advantage;
    EXPECT_NEAR(t.loss, -w * std::min(unclipped, clipped_term), 1e-6);
    if (k.clipped_branch) {
      EXPECT_EQ(t.dloss_dlogp, 0.0f) << k.log_ratio << " " << k.advantage;
      EXPECT_NEAR(t.loss, -w * clipped_term, 1e-6);  // constant in log p
    } else {
      EXPECT_NEAR(t.dloss_dlogp, -w * unclipped, 1e-6);
    }
    expect_derivative(LossFn::ppo, c, lp, w, q, k.advantage);
  }
}

TEST(Loss, CispoStopGradientOnTheClippedRatio) {
  const LossConfig c;
  const double lo = c.clip_low_threshold, hi = c.clip_high_threshold;
  const float q = -1.1f, w = 0.5f;
  for (const float log_ratio : {0.1f, -0.1f, 0.4f, -0.4f}) {
    for (const float a : {1.3f, -0.6f}) {
      const float lp = q + log_ratio;
      const double rho = std::exp(double(lp) - double(q));
      const double cr = std::clamp(rho, lo, hi);
      const bool outside = rho < lo || rho > hi;
      const TokenLoss t = token_loss(LossFn::cispo, c, lp, w, q, a);
      EXPECT_EQ(t.clipped, outside) << log_ratio;
      EXPECT_NEAR(t.loss, -w * cr * double(lp) * a, 1e-6);
      EXPECT_NEAR(t.dloss_dlogp, -w * cr * a, 1e-6);
      // Outside the range the clipped ratio is constant, so the plain difference applies;
      // inside, move q with log p so that the stop-gradient ratio stays fixed.
      expect_derivative(LossFn::cispo, c, lp, w, q, a, /*shift_q=*/!outside);
    }
  }
}

TEST(Loss, DroValueAndQuadraticTerm) {
  LossConfig c;
  c.beta = 0.5f;
  const float lp = -1.0f, q = -2.0f, a = 0.3f, w = 1.5f;
  const double d = double(lp) - double(q);
  const TokenLoss t = token_loss(LossFn::dro, c, lp, w, q, a);
  EXPECT_NEAR(t.loss, -w * (double(lp) * a - 0.5 * 0.5 * d * d), 1e-6);
  EXPECT_NEAR(t.dloss_dlogp, -w * (double(a) - 0.5 * d), 1e-6);
  expect_derivative(LossFn::dro, c, lp, w, q, a);
  expect_derivative(LossFn::dro, c, -4.0f, 1.0f, -0.5f, -2.0f);

  // With A = 0 only the penalty w·½β(log p − q)² remains: symmetric around q, gradient w·β·Δ.
  const float q0 = -1.0f;
  const TokenLoss above = token_loss(LossFn::dro, c, q0 + 0.5f, 2.0f, q0, 0.0f);
  const TokenLoss below = token_loss(LossFn::dro, c, q0 - 0.5f, 2.0f, q0, 0.0f);
  EXPECT_NEAR(above.loss, 2.0 * 0.5 * 0.5 * 0.25, 1e-6);
  EXPECT_NEAR(above.loss, below.loss, 1e-6);
  EXPECT_NEAR(above.dloss_dlogp, 2.0 * 0.5 * 0.5, 1e-6);
  EXPECT_NEAR(below.dloss_dlogp, -above.dloss_dlogp, 1e-6);
  const TokenLoss at_q = token_loss(LossFn::dro, c, q0, 2.0f, q0, 0.0f);
  EXPECT_EQ(at_q.loss, 0.0f);
  EXPECT_EQ(at_q.dloss_dlogp, 0.0f);
  // β = 0 leaves the policy-gradient term alone.
  c.beta = 0.0f;
  EXPECT_NEAR(token_loss(LossFn::dro, c, lp, w, q, a).loss, -w * double(lp) * a, 1e-6);
}

TEST(Loss, WeightScalesAndMasks) {
  const LossConfig c;
  for (LossFn fn : kAllFns) {
    const TokenLoss masked = token_loss(fn, c, -0.9f, 0.0f, -1.0f, 0.8f);
    EXPECT_EQ(masked.loss, 0.0f) << loss_fn_name(fn);
    EXPECT_EQ(masked.dloss_dlogp, 0.0f) << loss_fn_name(fn);
    const TokenLoss one = token_loss(fn, c, -0.9f, 1.0f, -1.0f, 0.8f);
    const TokenLoss three = token_loss(fn, c, -0.9f, 3.0f, -1.0f, 0.8f);
    EXPECT_NEAR(three.loss, 3.0 * one.loss, 1e-6) << loss_fn_name(fn);
    EXPECT_NEAR(three.dloss_dlogp, 3.0 * one.dloss_dlogp, 1e-6) << loss_fn_name(fn);
  }
}

TEST(Loss, ExtremeLogRatioStaysFinite) {
  const LossConfig c;
  for (LossFn fn : kAllFns) {
    for (const float lr : {200.0f, -200.0f}) {
      const TokenLoss t = token_loss(fn, c, lr - 5.0f, 1.0f, -5.0f, 1.0f);
      EXPECT_TRUE(std::isfinite(t.loss)) << loss_fn_name(fn) << " " << lr;
      EXPECT_TRUE(std::isfinite(t.dloss_dlogp)) << loss_fn_name(fn) << " " << lr;
    }
  }
}

TEST(Loss, MetricsAdd) {
  LossMetrics a{.loss = 1.5, .n_tokens = 4, .n_clipped = 1};
  EXPECT_EQ(LossMetrics{}.clip_fraction(), 0.0);
  a.add({.loss = -0.5, .n_tokens = 4, .n_clipped = 3});
  EXPECT_DOUBLE_EQ(a.loss, 1.0);
  EXPECT_EQ(a.n_tokens, 8);
  EXPECT_EQ(a.n_clipped, 4);
  EXPECT_DOUBLE_EQ(a.clip_fraction(), 0.5);
}

TEST(LossConfig, Validate) {
  EXPECT_NO_THROW(LossConfig{}.validate());
  EXPECT_NO_THROW((LossConfig{.clip_low_threshold = 1.0f, .clip_high_threshold = 1.0f, .beta = 0.0f}
                       .validate()));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_NE(error_of([] {
              LossConfig{.clip_low_threshold = 0.0f}.validate();
            }).find("clip_low_threshold"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              LossConfig{.clip_low_threshold = 1.1f}.validate();
            }).find("clip_low_threshold"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              LossConfig{.clip_low_threshold = nan}.validate();
            }).find("clip_low_threshold"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              LossConfig{.clip_high_threshold = 0.9f}.validate();
            }).find("clip_high_threshold"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              LossConfig{.clip_high_threshold = inf}.validate();
            }).find("clip_high_threshold"),
            std::string::npos);
  EXPECT_NE(error_of([] { LossConfig{.beta = -0.1f}.validate(); }).find("beta"), std::string::npos);
  EXPECT_NE(error_of([&] { LossConfig{.beta = nan}.validate(); }).find("beta"), std::string::npos);
}

TEST(LossInputs, ValidateRequiredFieldsAndLengths) {
  const std::vector<int32_t> tokens = {5, 6, 7};
  const std::vector<float> three = {0.1f, 0.2f, 0.3f};
  const std::vector<float> two = {0.1f, 0.2f};
  // cross_entropy needs only the tokens; weights are optional for every loss.
  EXPECT_NO_THROW(validate_loss_inputs(LossFn::cross_entropy, {.target_tokens = tokens}, 0));
  EXPECT_NO_THROW(validate_loss_inputs(
      LossFn::ppo, {.target_tokens = tokens, .logprobs = three, .advantages = three}, 0));
  EXPECT_NO_THROW(validate_loss_inputs(LossFn::dro, {}, 0));  // an empty datum

  for (LossFn fn : {LossFn::importance_sampling, LossFn::ppo, LossFn::cispo, LossFn::dro}) {
    const std::string no_q = error_of(
        [&] { validate_loss_inputs(fn, {.target_tokens = tokens, .advantages = three}, 4); });
    EXPECT_NE(no_q.find("datum 4"), std::string::npos) << no_q;
    EXPECT_NE(no_q.find("'logprobs'"), std::string::npos) << no_q;
    EXPECT_NE(no_q.find(loss_fn_name(fn)), std::string::npos) << no_q;
    const std::string no_a = error_of(
        [&] { validate_loss_inputs(fn, {.target_tokens = tokens, .logprobs = three}, 2); });
    EXPECT_NE(no_a.find("'advantages'"), std::string::npos) << no_a;
  }
  const std::string len = error_of([&] {
    validate_loss_inputs(LossFn::cross_entropy, {.target_tokens = tokens, .weights = two}, 7);
  });
  EXPECT_NE(len.find("datum 7"), std::string::npos) << len;
  EXPECT_NE(len.find("'weights' has 2 entries"), std::string::npos) << len;
  EXPECT_NE(len.find("3 target tokens"), std::string::npos) << len;
  // Present but unused fields must still line up.
  const std::string extra = error_of([&] {
    validate_loss_inputs(LossFn::cross_entropy, {.target_tokens = tokens, .logprobs = two}, 0);
  });
  EXPECT_NE(extra.find("'logprobs' has 2 entries"), std::string::npos) << extra;
}

TEST(LossInputs, ValidateValues) {
  const std::vector<int32_t> tokens = {5, 6};
  const std::vector<float> ok = {0.5f, 1.0f};
  const std::vector<float> nan = {0.5f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> inf = {-std::numeric_limits<float>::infinity(), 0.0f};
  const std::vector<float> negative = {1.0f, -0.5f};
  const std::vector<int32_t> bad_tokens = {5, -1};
  auto msg = [&](const LossInputs& in) {
    return error_of([&] { validate_loss_inputs(LossFn::ppo, in, 3); });
  };
  std::string m = msg({.target_tokens = tokens, .logprobs = nan, .advantages = ok});
  EXPECT_NE(m.find("datum 3: logprobs[1]"), std::string::npos) << m;
  EXPECT_NE(m.find("not finite"), std::string::npos) << m;
  m = msg({.target_tokens = tokens, .logprobs = ok, .advantages = inf});
  EXPECT_NE(m.find("advantages[0]"), std::string::npos) << m;
  m = msg({.target_tokens = tokens, .weights = nan, .logprobs = ok, .advantages = ok});
  EXPECT_NE(m.find("weights[1]"), std::string::npos) << m;
  m = msg({.target_tokens = tokens, .weights = negative, .logprobs = ok, .advantages = ok});
  EXPECT_NE(m.find("weights[1] = -0.5 is negative"), std::string::npos) << m;
  m = msg({.target_tokens = bad_tokens, .logprobs = ok, .advantages = ok});
  EXPECT_NE(m.find("target_tokens[1]"), std::string::npos) << m;
  EXPECT_NO_THROW(validate_loss_inputs(
      LossFn::ppo, {.target_tokens = tokens, .weights = ok, .logprobs = ok, .advantages = ok}, 0));
}

}  // namespace
}  // namespace spindle::engine
