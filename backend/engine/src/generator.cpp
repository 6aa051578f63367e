#include "spindle/engine/generator.h"

#include <algorithm>
#include <numeric>

#include "spindle/core/error.h"
#include "spindle/engine/sample_stream.h"

namespace spindle::engine {

const char* stop_reason_name(StopReason reason) {
  return reason == StopReason::stop ? "stop" : "length";
}

PrefillChunk next_prefill_chunk(const std::vector<GenerationRequest>& requests, size_t& next,
                                int64_t max_batch_tokens, const std::function<SeqId()>& create_seq,
                                std::vector<SeqId>& prompt_seqs) {
  std::vector<BatchSequence> batch;
  std::vector<size_t> which;
  int64_t tokens = 0;
  while (next < requests.size() &&
         (batch.empty() || tokens + int64_t(requests[next].prompt.size()) <= max_batch_tokens)) {
    const auto& r = requests[next];
    const SeqId seq = create_seq();
    prompt_seqs.push_back(seq);
    batch.push_back({seq, r.prompt, r.slot});
    which.push_back(next);
    tokens += int64_t(r.prompt.size());
    ++next;
  }
  std::vector<size_t> order(batch.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return batch[a].slot < batch[b].slot; });
  PrefillChunk chunk;
  for (size_t o : order) {
    chunk.batch.push_back(batch[o]);
    chunk.requests.push_back(which[o]);
  }
  return chunk;
}

struct Generator::Live {
  size_t request = 0;
  int32_t sample = 0;
  SeqId seq = -1;
  int32_t slot = -1;
  SampleStream stream;
  bool done = false;
};

Generator::Generator(const Model& model, KvCache& cache, const LoraSlotPool* lora,
                     const Tokenizer* tokenizer, GeneratorOptions options)
    : model_(model), cache_(cache), lora_(lora), tokenizer_(tokenizer), options_(options) {}

void Generator::validate(const GenerationRequest& r, size_t i) const {
  validate_sample_request(r.prompt, r.num_samples, r.params, model_.config(), tokenizer_,
                          fmt::format("request {}", i));
  if (r.slot >= 0) {
    SPINDLE_CHECK(lora_ && r.slot < lora_->max_slots() && lora_->occupied(r.slot),
                  invalid_argument, "request {}: adapter slot {} holds no adapter", i, r.slot);
  }
}

bool Generator::accept(Live& s, const float* logits, const GenerationRequest& r) {
  return s.stream.accept(logits, model_.config().vocab_size, cache_.length(s.seq), r.params,
                         tokenizer_, scratch_);
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
    const PrefillChunk chunk = next_prefill_chunk(
        requests, next, options_.max_batch_tokens, [&] { return cache_.create(); }, prompt_seqs);
    const std::vector<BatchSequence>& sorted = chunk.batch;
    model_.forward(sorted, cache_, lora_, state_, {.logits = LogitsFor::last_token});
    for (size_t k = 0; k < sorted.size(); ++k) {
      const size_t ri = chunk.requests[k];
      const auto& r = requests[ri];
      results[ri].resize(size_t(r.num_samples));
      for (int32_t n = 0; n < r.num_samples; ++n) {
        Live s;
        s.request = ri;
        s.sample = n;
        s.seq = cache_.fork(sorted[k].seq);  // shares the prompt's blocks
        s.slot = r.slot;
        s.stream = SampleStream(r.params.seed, n, r.prompt.back(), c.max_seq_len);
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
  const auto last_token = [](const Live& s) { return s.stream.last_token(); };
  while (next_decode_step(live, last_token, rows, step_tokens, batch)) {
    model_.forward(batch, cache_, lora_, state_, {.logits = LogitsFor::last_token});
    for (size_t k = 0; k < rows.size(); ++k) {
      Live& s = live[rows[k]];
      s.done = accept(s, state_.logits.row(int64_t(k)), requests[s.request]);
    }
  }
  for (Live& s : live) {
    results[s.request][size_t(s.sample)] = s.stream.take();
    cache_.release(s.seq);
  }
  live.clear();
}

}  // namespace spindle::engine
