// engine::top_logprobs against an independent log-softmax (long double, full sort).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "spindle/core/error.h"
#include "spindle/engine/sample_stream.h"

namespace spindle::engine {
namespace {

TEST(TopLogprobs, MatchesAFullSortOfLogSoftmax) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 3.0f);
  const int64_t vocab = 997;
  std::vector<float> logits(vocab);
  for (float& x : logits) x = n(rng);
  logits[5] = logits[17];  // a tie: the lower id first
  long double z = 0.0L;
  for (float x : logits) z += std::exp((long double)x);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int32_t k : {0, 1, 5, 40, int32_t(vocab)}) {
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> lps(static_cast<size_t>(k));
    top_logprobs(logits.data(), vocab, k, ids.data(), lps.data());
    for (int32_t j = 0; j < k; ++j) {
      EXPECT_EQ(ids[j], order[j]) << "k " << k << " rank " << j;
      EXPECT_NEAR(lps[j], double((long double)logits[order[j]] - std::log(z)), 1e-5) << j;
      EXPECT_FLOAT_EQ(lps[j], token_logprob(logits.data(), vocab, ids[j]));
    }
  }
  int32_t id = 0;
  float lp = 0.0f;
  EXPECT_THROW(top_logprobs(logits.data(), vocab, int32_t(vocab) + 1, &id, &lp), Error);
}

}  // namespace
}  // namespace spindle::engine
