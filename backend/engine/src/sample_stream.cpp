#include "spindle/engine/sample_stream.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "spindle/core/error.h"

namespace spindle::engine {

void validate_sample_request(std::span<const int32_t> prompt, int32_t num_samples,
                             const SamplingParams& params, const ModelConfig& config,
                             const Tokenizer* tokenizer, std::string_view what) {
  params.validate();
  SPINDLE_CHECK(!prompt.empty(), invalid_argument,
                "{}: empty prompt (start with the BOS token)", what);
  SPINDLE_CHECK(int64_t(prompt.size()) < config.max_seq_len, invalid_argument,
                "{}: prompt of {} tokens leaves no room in the model's context of {}", what,
                prompt.size(), config.max_seq_len);
  SPINDLE_CHECK(num_samples >= 1 && num_samples <= 1024, invalid_argument,
                "{}: num_samples must be in [1, 1024], got {}", what, num_samples);
  SPINDLE_CHECK(params.stop_strings.empty() || tokenizer != nullptr, invalid_argument,
                "{}: stop strings need a tokenizer", what);
  for (int32_t t : prompt) {
    SPINDLE_CHECK(t >= 0 && t < config.vocab_size, invalid_argument,
                  "{}: prompt token {} outside vocab [0, {})", what, t, config.vocab_size);
  }
}

float token_logprob(const float* logits, int64_t vocab, int32_t token) {
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i] - max_logit));
  const double log_z = double(max_logit) + std::log(sum);
  return float(double(logits[token]) - log_z);
}

void top_logprobs(const float* logits, int64_t vocab, int32_t k, int32_t* ids, float* logprobs) {
  SPINDLE_CHECK(k >= 0 && k <= vocab, invalid_argument, "top_logprobs: k {} outside [0, {}]", k,
                vocab);
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i] - max_logit));
  const double log_z = double(max_logit) + std::log(sum);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) order[size_t(i)] = int32_t(i);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int32_t j = 0; j < k; ++j) {
    ids[j] = order[size_t(j)];
    logprobs[j] = float(double(logits[order[size_t(j)]]) - log_z);
  }
}

SampleStream::SampleStream(uint64_t seed, int32_t index, int32_t prompt_last, int64_t max_len)
    : rng_(sample_seed(seed, uint64_t(index))), prompt_last_(prompt_last), max_len_(max_len) {}

bool append_sampled_token(Completion& out, int32_t token, float logprob, int32_t prompt_last,
                          int64_t cached_len, int64_t max_len, const SamplingParams& params,
                          const Tokenizer* tokenizer) {
  const int32_t prev = out.tokens.empty() ? prompt_last : out.tokens.back();
  out.tokens.push_back(token);
  out.logprobs.push_back(logprob);
  const auto& stops = params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
    out.stop_reason = StopReason::stop;  // the stop token's text is not appended
    return true;
  }
  if (tokenizer) {
    // Decodes of consecutive spans concatenate (tokenizer.h), so the text grows by one token's
    // piece per step, and a stop string can only end inside the newly appended bytes.
    const size_t old_size = out.text.size();
    out.text += tokenizer->decode({&token, 1}, prev);
    for (const auto& stop : params.stop_strings) {
      const size_t from = old_size >= stop.size() ? old_size - stop.size() + 1 : 0;
      if (auto pos = out.text.find(stop, from); pos != std::string::npos) {
        out.text.resize(pos);
        out.stop_reason = StopReason::stop;
        return true;
      }
    }
  }
  const int64_t len = cached_len + 1;  // + the token just sampled (not yet cached)
  if (int64_t(out.tokens.size()) >= params.max_tokens || len >= max_len) {
    out.stop_reason = StopReason::length;
    return true;
  }
  return false;
}

bool SampleStream::accept(const float* logits, int64_t vocab, int64_t cached_len,
                          const SamplingParams& params, const Tokenizer* tokenizer,
                          std::vector<float>& scratch) {
  const SampledToken t = sample_token(logits, vocab, params, rng_, scratch);
  last_token_ = t.token;
  return append_sampled_token(out_, t.token, t.logprob, prompt_last_, cached_len, max_len_,
                              params, tokenizer);
}

}  // namespace spindle::engine
