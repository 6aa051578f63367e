#pragma once
// In-process generation over a heterogeneous batch: every request brings its prompt, its
// adapter slot and its sampling parameters. Prompts are prefilled together; the n samples of a
// request fork the prompt's KV sequence (sharing its blocks); decode steps batch every live
// sequence across adapters, rows grouped by slot so the SGMV segments stay long.
//
// This is the engine-level loop; the scheduler (a later issue) adds admission, token budgets
// and cold-adapter parking on top of Model::forward.

#include <cstdint>
#include <string>
#include <vector>

#include "spindle/engine/model.h"
#include "spindle/engine/sampler.h"
#include "spindle/engine/tokenizer.h"

namespace spindle::engine {

enum class StopReason : uint8_t { stop, length };
const char* stop_reason_name(StopReason reason);

struct GenerationRequest {
  std::vector<int32_t> prompt;  // >= 1 token (start with BOS for an empty prompt)
  int32_t slot = -1;            // adapter slot, −1 = base only
  int32_t num_samples = 1;
  SamplingParams params;
};

struct Completion {
  // Sampled tokens, including a stop token that ended the sequence; logprobs align with them.
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  StopReason stop_reason = StopReason::length;
  // Decoded completion (needs a tokenizer); excludes a matched stop string / stop token.
  std::string text;
};

struct GeneratorOptions {
  int64_t max_batch_tokens = 4096;  // prefill chunking budget per forward
};

class Generator {
 public:
  // `tokenizer` may be null (then stop strings are rejected and text stays empty).
  Generator(const Model& model, KvCache& cache, const LoraSlotPool* lora,
            const Tokenizer* tokenizer, GeneratorOptions options = {});

  // One result vector per request, num_samples completions each. Validates every request
  // before any work; a context that ends before max_tokens stops with `length`.
  std::vector<std::vector<Completion>> generate(const std::vector<GenerationRequest>& requests);

 private:
  struct Live;
  void validate(const GenerationRequest& r, size_t index) const;
  void run(const std::vector<GenerationRequest>& requests,
           std::vector<std::vector<Completion>>& results, std::vector<Live>& live,
           std::vector<SeqId>& prompt_seqs);
  // Appends one sampled token; returns true when the sequence is finished.
  bool accept(Live& s, const float* logits, const GenerationRequest& r);

  const Model& model_;
  KvCache& cache_;
  const LoraSlotPool* lora_;
  const Tokenizer* tokenizer_;
  GeneratorOptions options_;
  ForwardState state_;
  std::vector<float> scratch_;
};

}  // namespace spindle::engine
