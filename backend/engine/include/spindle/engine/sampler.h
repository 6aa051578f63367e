#pragma once
// Token sampling from one row of logits: greedy, temperature, top-k, top-p, per-sequence seeded
// RNG (same seed, same tokens, independent of batch composition).
//
// The reported logprob is the raw model log-probability log_softmax(logits)[token] — before
// temperature and truncation, as vLLM reports by default — so it equals what compute_logprobs
// returns for the same tokens and an importance ratio p/q starts at exactly 1.

#include <cstdint>
#include <string>
#include <vector>

namespace spindle::engine {

struct SamplingParams {
  int32_t max_tokens = 16;
  float temperature = 1.0f;  // 0 = greedy (argmax, first index on ties)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off; in (0, 1]
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;

  // Throws invalid_argument naming the field (temperature < 0, top_p outside (0, 1], ...).
  void validate() const;
};

// splitmix64-seeded xoshiro256**: small, fast, reproducible everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  float uniform();  // [0, 1)
 private:
  uint64_t s_[4];
};

// Seed of sample `index` of a request with seed `seed` (independent streams per sample).
uint64_t sample_seed(uint64_t seed, uint64_t index);

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;
};

// Picks one token from logits[vocab]. `scratch` is reused between calls.
SampledToken sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                          Rng& rng, std::vector<float>& scratch);

}  // namespace spindle::engine
