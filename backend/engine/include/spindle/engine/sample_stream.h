#pragma once
// One sample's decoding state, shared by engine::Generator and the scheduler so that a request
// gets the same tokens whichever loop runs it: the per-sample RNG stream (seeded from the
// request's seed and the sample index), stop tokens and strings, max_tokens, the context end,
// and the completion's text grown one token's piece per step.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "spindle/engine/generator.h"
#include "spindle/engine/model_config.h"
#include "spindle/engine/sampler.h"
#include "spindle/engine/tokenizer.h"

namespace spindle::engine {

// Checks a sampling request against the model: sampling parameters, a non-empty prompt of
// in-vocab tokens that leaves room in the context, num_samples in [1, 1024], stop strings only
// with a tokenizer. Throws invalid_argument whose message starts with `what` ("request 3").
// The adapter slot is the caller's to check.
void validate_sample_request(std::span<const int32_t> prompt, int32_t num_samples,
                             const SamplingParams& params, const ModelConfig& config,
                             const Tokenizer* tokenizer, std::string_view what);

// log_softmax(logits)[token] with sample_token's normaliser (max-subtracted, summed in double),
// so compute_logprobs reports exactly what sampling reported for the same token.
float token_logprob(const float* logits, int64_t vocab, int32_t token);

// The k most likely tokens of log_softmax(logits), most likely first (ties: lower id first),
// with token_logprob's normaliser: ids[0..k) and logprobs[0..k). k <= vocab.
void top_logprobs(const float* logits, int64_t vocab, int32_t k, int32_t* ids, float* logprobs);

// Appends a sampled token to `out` (token, logprob, text) and applies the stop conditions:
// returns true when the sequence is finished, a stop token (kept, its text not appended), a stop
// string (cut from the text), max_tokens or `max_len` reached (`length`). `prompt_last` is the
// prompt's last token (the decode context of the first piece); `cached_len` is the sequence's
// length in the KV cache, the new token not included. `tokenizer` may be null. SampleStream
// and engine_cuda::DeviceGenerator (which samples on the device) share it.
bool append_sampled_token(Completion& out, int32_t token, float logprob, int32_t prompt_last,
                          int64_t cached_len, int64_t max_len, const SamplingParams& params,
                          const Tokenizer* tokenizer);

class SampleStream {
 public:
  SampleStream() = default;
  // Sample `index` of a request whose prompt ends with `prompt_last`; the sequence stops with
  // `length` once it reaches `max_len` tokens (the model's context).
  SampleStream(uint64_t seed, int32_t index, int32_t prompt_last, int64_t max_len);

  // Samples one token from logits[vocab] and appends it (token, logprob, text). `cached_len`
  // is the sequence's length in the KV cache, the new token not included. Returns true when
  // the sequence is finished: a stop token (kept, its text not appended), a stop string (cut
  // from the text), max_tokens or the context end (`length`). `tokenizer` may be null.
  bool accept(const float* logits, int64_t vocab, int64_t cached_len,
              const SamplingParams& params, const Tokenizer* tokenizer,
              std::vector<float>& scratch);

  int32_t last_token() const { return last_token_; }  // input of the next decode step
  const Completion& completion() const { return out_; }
  Completion take() { return std::move(out_); }

 private:
  Rng rng_;
  Completion out_;
  int32_t last_token_ = 0;
  int32_t prompt_last_ = 0;
  int64_t max_len_ = 0;
};

}  // namespace spindle::engine
