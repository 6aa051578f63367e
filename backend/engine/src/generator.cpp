#include "spindle/engine/generator.h"

#include <algorithm>
#include <numeric>

#include "spindle/core/error.h"

namespace spindle::engine {

const char* stop_reason_name(StopReason reason) {
  return reason == StopReason::stop ? "stop" : "length";
}

struct Generator::Live {
  size_t request = 0;
  int32_t sample = 0;
  SeqId seq = -1;
  int32_t slot = -1;
  Rng rng;
  Completion out;
  int32_t last_token = 0;  // input of the next decode step
  int32_t prompt_last = 0;  // token before the completion (decode context)
  int64_t max_len = 0;      // sequence length at which `length` stops it
  bool done = false;
};

Generator::Generator(const Model& model, KvCache& cache, const LoraSlotPool* lora,
                     const Tokenizer* tokenizer, GeneratorOptions options)
    : model_(model), cache_(cache), lora_(lora), tokenizer_(tokenizer), options_(options) {}

void Generator::validate(const GenerationRequest& r, size_t i) const {
  const ModelConfig& c = model_.config();
  r.params.validate();
  SPINDLE_CHECK(!r.prompt.empty(), invalid_argument,
                "request {}: empty prompt (start with the BOS token)", i);
  SPINDLE_CHECK(int64_t(r.prompt.size()) < c.max_seq_len, invalid_argument,
                "request {}: prompt of {} tokens leaves no room in the model's context of {}", i,
                r.prompt.size(), c.max_seq_len);
  SPINDLE_CHECK(r.num_samples >= 1 && r.num_samples <= 1024, invalid_argument,
                "request {}: num_samples must be in [1, 1024], got {}", i, r.num_samples);
  SPINDLE_CHECK(r.params.stop_strings.empty() || tokenizer_ != nullptr, invalid_argument,
                "request {}: stop strings need a tokenizer", i);
  for (int32_t t : r.prompt) {
    SPINDLE_CHECK(t >= 0 && t < c.vocab_size, invalid_argument,
                  "request {}: prompt token {} outside vocab [0, {})", i, t, c.vocab_size);
  }
  if (r.slot >= 0) {
    SPINDLE_CHECK(lora_ && r.slot < lora_->max_slots() && lora_->occupied(r.slot),
                  invalid_argument, "request {}: adapter slot {} holds no adapter", i, r.slot);
  }
}

bool Generator::accept(Live& s, const float* logits, const GenerationRequest& r) {
  const SampledToken t =
      sample_token(logits, model_.config().vocab_size, r.params, s.rng, scratch_);
  const int32_t prev = s.out.tokens.empty() ? s.prompt_last : s.out.tokens.back();
  s.out.tokens.push_back(t.token);
  s.out.logprobs.push_back(t.logprob);
  s.last_token = t.token;
  const auto& stops = r.params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), t.token) != stops.end()) {
    s.out.stop_reason = StopReason::stop;  // the stop token's text is not appended
    return true;
  }
  if (tokenizer_) {
    // Decodes of consecutive spans concatenate (tokenizer.h), so the text grows by one token's
    // piece per step, and a stop string can only end inside the newly appended bytes.
    const size_t old_size = s.out.text.size();
    s.out.text += tokenizer_->decode({&t.token, 1}, prev);
    for (const auto& stop : r.params.stop_strings) {
      const size_t from = old_size >= stop.size() ? old_size - stop.size() + 1 : 0;
      if (auto pos = s.out.text.find(stop, from); pos != std::string::npos) {
        s.out.text.resize(pos);
        s.out.stop_reason = StopReason::stop;
        return true;
      }
    }
  }
  const int64_t len = cache_.length(s.seq) + 1;  // + the token just sampled (not yet cached)
  if (int64_t(s.out.tokens.size()) >= r.params.max_tokens || len >= s.max_len) {
    s.out.stop_reason = StopReason::length;
    return true;
  }
  return false;
}

std::vector<std::vector<Completion>> Generator::generate(
    const std::vector<GenerationRequest>& requests) {
  for (size_t i = 0; i < requests.size(); ++i) validate(requests[i], i);
  std::vector<std::vector<Completion>> results(requests.size());
  std::vector<Live> live;
  std::vector<SeqId> prompt_seqs;
  try {
    run(requests, results, live, prompt_seqs);
  } catch (...) {
    // Nothing stays allocated in the cache after a failed call.
    for (SeqId seq : prompt_seqs) {
      if (seq >= 0) cache_.release(seq);
    }
    for (Live& s : live) cache_.release(s.seq);
    throw;
  }
  return results;
}

void Generator::run(const std::vector<GenerationRequest>& requests,
                    std::vector<std::vector<Completion>>& results, std::vector<Live>& live,
                    std::vector<SeqId>& prompt_seqs) {
  const ModelConfig& c = model_.config();

  // Prefill prompts in chunks of whole requests under the token budget.
  size_t next = 0;
  while (next < requests.size()) {
    std::vector<BatchSequence> batch;
    std::vector<size_t> which;
    int64_t tokens = 0;
    while (next < requests.size() &&
           (batch.empty() ||
            tokens + int64_t(requests[next].prompt.size()) <= options_.max_batch_tokens)) {
      const auto& r = requests[next];
      const SeqId seq = cache_.create();
      prompt_seqs.push_back(seq);
      batch.push_back({seq, r.prompt, r.slot});
      which.push_back(next);
      tokens += int64_t(r.prompt.size());
      ++next;
    }
    // Group by slot so SGMV segments are long; logits rows follow the batch order.
    std::vector<size_t> order(batch.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return batch[a].slot < batch[b].slot; });
    std::vector<BatchSequence> sorted;
    for (size_t o : order) sorted.push_back(batch[o]);
    model_.forward(sorted, cache_, lora_, state_, {.logits = LogitsFor::last_token});
    for (size_t k = 0; k < sorted.size(); ++k) {
      const size_t ri = which[order[k]];
      const auto& r = requests[ri];
      results[ri].resize(size_t(r.num_samples));
      for (int32_t n = 0; n < r.num_samples; ++n) {
        Live s;
        s.request = ri;
        s.sample = n;
        s.seq = cache_.fork(sorted[k].seq);  // shares the prompt's blocks
        s.slot = r.slot;
        s.rng = Rng(sample_seed(r.params.seed, uint64_t(n)));
        s.prompt_last = r.prompt.back();
        s.max_len = c.max_seq_len;
        live.push_back(std::move(s));
        Live& added = live.back();
        added.done = r.params.max_tokens == 0 || accept(added, state_.logits.row(int64_t(k)), r);
      }
    }
  }
  for (SeqId& seq : prompt_seqs) {
    cache_.release(seq);
    seq = -1;
  }

  // Decode: one token per live sequence per step, all adapters in one batch.
  std::vector<BatchSequence> batch;
  std::vector<int32_t> step_tokens;
  std::vector<size_t> rows;
  for (;;) {
    rows.clear();
    for (size_t i = 0; i < live.size(); ++i) {
      if (!live[i].done) rows.push_back(i);
    }
    if (rows.empty()) break;
    std::stable_sort(rows.begin(), rows.end(),
                     [&](size_t a, size_t b) { return live[a].slot < live[b].slot; });
    step_tokens.resize(rows.size());
    batch.clear();
    for (size_t k = 0; k < rows.size(); ++k) {
      step_tokens[k] = live[rows[k]].last_token;
      batch.push_back({live[rows[k]].seq, {&step_tokens[k], 1}, live[rows[k]].slot});
    }
    model_.forward(batch, cache_, lora_, state_, {.logits = LogitsFor::last_token});
    for (size_t k = 0; k < rows.size(); ++k) {
      Live& s = live[rows[k]];
      s.done = accept(s, state_.logits.row(int64_t(k)), requests[s.request]);
    }
  }
  for (Live& s : live) {
    results[s.request][size_t(s.sample)] = std::move(s.out);
    cache_.release(s.seq);
  }
  live.clear();
}

}  // namespace spindle::engine
