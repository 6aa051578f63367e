#pragma once
// In-process generation over a heterogeneous batch: every request brings its prompt, its
// adapter slot and its sampling parameters. Prompts are prefilled together; the n samples of a
// request fork the prompt's KV sequence (sharing its blocks); decode steps batch every live
// sequence across adapters, rows grouped by slot so the SGMV segments stay long.
//
// This is the engine-level loop; the scheduler (a later issue) adds admission, token budgets
// and cold-adapter parking on top of Model::forward.

#include <algorithm>
#include <cstdint>
#include <functional>
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

// One prefill forward of Generator and engine_cuda::DeviceGenerator: whole requests, stably sorted by
// adapter slot so SGMV segments are long (logits rows follow this order).
struct PrefillChunk {
  std::vector<BatchSequence> batch;
  std::vector<size_t> requests;  // request index of each batch entry
};
// Takes requests from `next` on (advancing it) while their prompts fit in max_batch_tokens (at
// least one), each in a fresh KV sequence from `create_seq`, pushed onto `prompt_seqs` as soon
// as it exists (the caller releases them, also on failure).
PrefillChunk next_prefill_chunk(const std::vector<GenerationRequest>& requests, size_t& next,
                                int64_t max_batch_tokens, const std::function<SeqId()>& create_seq,
                                std::vector<SeqId>& prompt_seqs);

// One decode step of Generator and engine_cuda::DeviceGenerator: the entries of `live` not yet done
// (Live has done, slot, seq), stably sorted by adapter slot so SGMV segments are long, each
// feeding last_token(entry). Fills `rows` (indices into live), `step_tokens` (which `batch`
// points into) and `batch`; returns false when every entry is done.
template <class Live, class LastToken>
bool next_decode_step(const std::vector<Live>& live, LastToken last_token,
                      std::vector<size_t>& rows, std::vector<int32_t>& step_tokens,
                      std::vector<BatchSequence>& batch) {
  rows.clear();
  for (size_t i = 0; i < live.size(); ++i) {
    if (!live[i].done) rows.push_back(i);
  }
  if (rows.empty()) return false;
  std::stable_sort(rows.begin(), rows.end(),
                   [&](size_t a, size_t b) { return live[a].slot < live[b].slot; });
  step_tokens.resize(rows.size());
  batch.clear();
  for (size_t k = 0; k < rows.size(); ++k) {
    step_tokens[k] = last_token(live[rows[k]]);
    batch.push_back({live[rows[k]].seq, {&step_tokens[k], 1}, live[rows[k]].slot});
  }
  return true;
}

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
