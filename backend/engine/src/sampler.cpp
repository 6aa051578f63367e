#include "spindle/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "spindle/core/error.h"

namespace spindle::engine {

void SamplingParams::validate() const {
  SPINDLE_CHECK(max_tokens >= 0, invalid_argument, "max_tokens must be >= 0, got {}", max_tokens);
  SPINDLE_CHECK(std::isfinite(temperature) && temperature >= 0.0f, invalid_argument,
                "temperature must be a finite number >= 0, got {}", temperature);
  SPINDLE_CHECK(top_k >= 0, invalid_argument, "top_k must be >= 0 (0 = off), got {}", top_k);
  SPINDLE_CHECK(top_p > 0.0f && top_p <= 1.0f, invalid_argument,
                "top_p must be in (0, 1], got {}", top_p);
  for (const auto& s : stop_strings) {
    SPINDLE_CHECK(!s.empty(), invalid_argument, "stop strings must not be empty");
  }
}

static uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float Rng::uniform() { return float(next() >> 40) * (1.0f / float(1ull << 24)); }

uint64_t sample_seed(uint64_t seed, uint64_t index) {
  uint64_t x = seed ^ (index * 0xd1b54a32d192ed03ull);
  return splitmix64(x);
}

SampledToken sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                          Rng& rng, std::vector<float>& scratch) {
  // Raw log-softmax normaliser (reported logprob), computed in double for stability.
  float max_logit = logits[0];
  int64_t argmax = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      argmax = i;
    }
  }
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i] - max_logit));
  const double log_z = double(max_logit) + std::log(sum);
  auto result = [&](int64_t tok) {
    return SampledToken{int32_t(tok), float(double(logits[tok]) - log_z)};
  };
  if (params.temperature == 0.0f) return result(argmax);

  // Tempered probabilities over the candidate set (all, or the top-k).
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  const auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t n = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    n = params.top_k;
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), by_logit);
    idx.resize(size_t(n));
  }
  scratch.resize(size_t(n));
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double p = std::exp(double(logits[idx[size_t(i)]] - max_logit) / params.temperature);
    scratch[size_t(i)] = float(p);
    total += p;
  }
  if (params.top_p < 1.0f) {
    // Keep the smallest prefix (by probability, descending) whose mass reaches top_p.
    if (!(params.top_k > 0 && params.top_k < vocab)) {
      std::vector<int32_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return scratch[size_t(a)] > scratch[size_t(b)] ||
               (scratch[size_t(a)] == scratch[size_t(b)] && idx[size_t(a)] < idx[size_t(b)]);
      });
      std::vector<int32_t> idx2(static_cast<size_t>(n));
      std::vector<float> p2(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        idx2[size_t(i)] = idx[size_t(order[size_t(i)])];
        p2[size_t(i)] = scratch[size_t(order[size_t(i)])];
      }
      idx.swap(idx2);
      scratch.swap(p2);
    }
    double mass = 0.0;
    int64_t keep = 0;
    while (keep < n) {
      mass += scratch[size_t(keep)];
      ++keep;
      if (mass >= double(params.top_p) * total) break;
    }
    n = keep;
    total = mass;
  }
  const double r = double(rng.uniform()) * total;
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    acc += scratch[size_t(i)];
    if (r < acc) return result(idx[size_t(i)]);
  }
  return result(idx[size_t(n - 1)]);  // rounding: r landed on the total
}

}  // namespace spindle::engine
