// Sampler: greedy, seeds, top-k / top-p truncation, the distribution it draws from.

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "spindle/core/error.h"
#include "spindle/engine/sampler.h"

namespace spindle::engine {
namespace {

std::vector<float> logits_of(std::vector<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

TEST(Sampler, GreedyTakesFirstMaxAndReportsRawLogprob) {
  const std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0;
  Rng rng(1);
  std::vector<float> scratch;
  const auto t = sample_token(l.data(), 4, p, rng, scratch);
  EXPECT_EQ(t.token, 1);
  double z = 0;
  for (float x : l) z += std::exp(double(x));
  EXPECT_NEAR(t.logprob, 2.0 - std::log(z), 1e-6);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[size_t(i)] = float(i % 7) * 0.1f;
  SamplingParams p;
  std::vector<float> scratch;
  auto draw = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(sample_token(l.data(), 50, p, rng, scratch).token);
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
  EXPECT_NE(sample_seed(42, 0), sample_seed(42, 1));
}

TEST(Sampler, FrequenciesFollowTemperedDistribution) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  const auto l = logits_of(probs);
  std::vector<float> scratch;
  for (float temp : {1.0f, 0.5f}) {
    SamplingParams p;
    p.temperature = temp;
    Rng rng(9);
    std::vector<int> counts(4, 0);
    const int n = 200000;
    for (int i = 0; i < n; ++i) ++counts[size_t(sample_token(l.data(), 4, p, rng, scratch).token)];
    double z = 0;
    for (double q : probs) z += std::pow(q, 1.0 / temp);
    for (int k = 0; k < 4; ++k) {
      const double expect = std::pow(probs[size_t(k)], 1.0 / temp) / z;
      const double sigma = std::sqrt(expect * (1 - expect) / n);
      EXPECT_NEAR(double(counts[size_t(k)]) / n, expect, 5 * sigma + 1e-4) << "T=" << temp;
    }
  }
}

TEST(Sampler, TopKAndTopPTruncate) {
  const auto l = logits_of({0.05, 0.5, 0.3, 0.15});
  std::vector<float> scratch;
  Rng rng(3);
  SamplingParams k1;
  k1.top_k = 1;
  SamplingParams k2;
  k2.top_k = 2;
  SamplingParams p;
  p.top_p = 0.7f;  // keeps {1 (0.5), 2 (0.3)}
  for (int i = 0; i < 2000; ++i) {
    EXPECT_EQ(sample_token(l.data(), 4, k1, rng, scratch).token, 1);
    const int32_t a = sample_token(l.data(), 4, k2, rng, scratch).token;
    EXPECT_TRUE(a == 1 || a == 2);
    const int32_t b = sample_token(l.data(), 4, p, rng, scratch).token;
    EXPECT_TRUE(b == 1 || b == 2);
  }
}

TEST(Sampler, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  try {
    p.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos);
  }
  p.top_p = 1;
  p.temperature = -1;
  EXPECT_THROW(p.validate(), Error);
}

}  // namespace
}  // namespace spindle::engine
