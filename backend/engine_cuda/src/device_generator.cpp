#include "spindle/engine_cuda/device_generator.h"

#include <algorithm>

#include "spindle/core/error.h"
#include "spindle/engine/sample_stream.h"
#include "spindle/kernels/cuda/activation.h"

namespace spindle::engine_cuda {

namespace cuda = kernels::cuda;
using engine::BatchSequence;
using engine::Completion;
using engine::GenerationRequest;

struct DeviceGenerator::Live {
  size_t request = 0;
  int32_t sample = 0;
  SeqId seq = -1;
  int32_t slot = -1;
  uint64_t seed = 0;  // engine::sample_seed(request seed, sample index)
  int32_t prompt_last = 0;
  int32_t last_token = 0;
  Completion out;
  bool done = false;
};

namespace {

// Gathers the chosen logits rows (when they are not already rows 0..n−1) and samples them.
template <class T>
void sample_rows(const DeviceTensor& logits, const std::vector<int32_t>& logit_rows,
                 DeviceTensor& gathered, cuda::DeviceBuffer<int32_t>& d_rows,
                 const cuda::RowSampling* d_params, int32_t* d_tokens, float* d_logprobs,
                 cuda::DeviceBuffer<unsigned char>& scratch, cudaStream_t s) {
  const int64_t n = int64_t(logit_rows.size()), vocab = logits.cols();
  bool identity = n <= logits.rows();
  for (int64_t k = 0; identity && k < n; ++k) identity = logit_rows[size_t(k)] == k;
  const T* src = logits.data<T>();
  if (!identity) {
    gathered.ensure(n, vocab, precision_of<T>());
    upload_table(logit_rows, d_rows, s);
    cuda::embedding_gather(logits.data<T>(), vocab, d_rows.data(), n, gathered.data<T>(), vocab,
                           s);
    src = gathered.data<T>();
  }
  ensure_capacity(scratch, std::max<size_t>(1, cuda::sampling_scratch_bytes(n, vocab)));
  cuda::sample_tokens(src, vocab, n, vocab, d_params, d_tokens, d_logprobs, scratch.data(), s);
}

}  // namespace

DeviceGenerator::DeviceGenerator(DeviceModel& model, DeviceKvCache& cache,
                                 const DeviceLoraPool* lora, const engine::Tokenizer* tokenizer,
                                 engine::GeneratorOptions options,
                                 DeviceGeneratorOptions device_options)
    : model_(model), cache_(cache), lora_(lora), tokenizer_(tokenizer), options_(options),
      device_options_(device_options) {}

void DeviceGenerator::validate(const GenerationRequest& r, size_t i) const {
  engine::validate_sample_request(r.prompt, r.num_samples, r.params, model_.config(), tokenizer_,
                                  fmt::format("request {}", i));
  if (r.slot >= 0) {
    SPINDLE_CHECK(lora_ && r.slot < lora_->max_slots() && lora_->occupied(r.slot),
                  invalid_argument, "request {}: adapter slot {} holds no adapter", i, r.slot);
  }
}

std::vector<std::vector<Completion>> DeviceGenerator::generate(
    const std::vector<GenerationRequest>& requests) {
  for (size_t i = 0; i < requests.size(); ++i) validate(requests[i], i);
  std::vector<std::vector<Completion>> results(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) results[i].resize(size_t(requests[i].num_samples));
  std::vector<Live> live;
  std::vector<SeqId> prompt_seqs;
  try {
    run(requests, live, prompt_seqs);
  } catch (...) {
    // Nothing stays allocated in the cache after a failed call.
    for (SeqId seq : prompt_seqs) {
      if (seq >= 0) cache_.release(seq);
    }
    for (Live& s : live) cache_.release(s.seq);
    throw;
  }
  for (Live& s : live) {
    results[s.request][size_t(s.sample)] = std::move(s.out);
    cache_.release(s.seq);
  }
  return results;
}

bool DeviceGenerator::accept(Live& s, int32_t token, float logprob,
                             const GenerationRequest& r) const {
  // engine::SampleStream::accept after its sampling step.
  s.last_token = token;
  return engine::append_sampled_token(s.out, token, logprob, s.prompt_last, cache_.length(s.seq),
                                      model_.config().max_seq_len, r.params, tokenizer_);
}

void DeviceGenerator::sample_step(const std::vector<GenerationRequest>& requests,
                                  std::vector<Live>& live, const std::vector<size_t>& rows,
                                  const std::vector<int32_t>& logit_rows) {
  const size_t n = rows.size();
  if (n == 0) return;
  const cudaStream_t s = model_.stream();
  // The pinned buffer is free: the previous step synchronised before returning.
  const size_t params_bytes = TableStaging::aligned(n * sizeof(cuda::RowSampling));
  const size_t io_bytes = params_bytes + n * (sizeof(int32_t) + sizeof(float));
  if (host_io_.bytes() < io_bytes) host_io_ = PinnedBuffer(std::max<size_t>(io_bytes * 2, 4096));
  auto* params = reinterpret_cast<cuda::RowSampling*>(host_io_.data());
  auto* tokens = reinterpret_cast<int32_t*>(host_io_.data() + params_bytes);
  auto* logprobs = reinterpret_cast<float*>(host_io_.data() + params_bytes + n * sizeof(int32_t));
  for (size_t k = 0; k < n; ++k) {
    const Live& l = live[rows[k]];
    const engine::SamplingParams& p = requests[l.request].params;
    params[k] = {.temperature = p.temperature,
                 .top_k = p.top_k,
                 .top_p = p.top_p,
                 .seed = l.seed,
                 .counter = uint64_t(l.out.tokens.size())};
  }
  ensure_capacity(d_params_, n);
  cuda::check(cudaMemcpyAsync(d_params_.data(), params, n * sizeof(cuda::RowSampling),
                              cudaMemcpyHostToDevice, s),
              "cudaMemcpyAsync H2D (sampling params)");
  ensure_capacity(d_tokens_, n);
  ensure_capacity(d_logprobs_, n);
  if (model_.precision() == Precision::fp32) {
    sample_rows<float>(state_.logits, logit_rows, sample_logits_, d_rows_, d_params_.data(),
                       d_tokens_.data(), d_logprobs_.data(), d_scratch_, s);
  } else {
    sample_rows<cuda::bf16>(state_.logits, logit_rows, sample_logits_, d_rows_, d_params_.data(),
                            d_tokens_.data(), d_logprobs_.data(), d_scratch_, s);
  }
  cuda::check(cudaMemcpyAsync(tokens, d_tokens_.data(), n * sizeof(int32_t),
                              cudaMemcpyDeviceToHost, s),
              "cudaMemcpyAsync D2H (sampled tokens)");
  cuda::check(cudaMemcpyAsync(logprobs, d_logprobs_.data(), n * sizeof(float),
                              cudaMemcpyDeviceToHost, s),
              "cudaMemcpyAsync D2H (logprobs)");
  cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (sampling)");
  for (size_t k = 0; k < n; ++k) {
    Live& l = live[rows[k]];
    l.done = accept(l, tokens[k], logprobs[k], requests[l.request]);
  }
}

void DeviceGenerator::run(const std::vector<GenerationRequest>& requests,
                          std::vector<Live>& live, std::vector<SeqId>& prompt_seqs) {
  const DeviceForwardOptions fwd{.logits = engine::LogitsFor::last_token,
                                 .keep_activations = false,
                                 .copy_logits = false};
  std::vector<size_t> rows;
  std::vector<int32_t> logit_rows;

  // Prefill prompts in chunks of whole requests under the token budget.
  size_t next = 0;
  while (next < requests.size()) {
    const engine::PrefillChunk chunk = engine::next_prefill_chunk(
        requests, next, options_.max_batch_tokens, [&] { return cache_.create(); }, prompt_seqs);
    const std::vector<BatchSequence>& sorted = chunk.batch;
    model_.forward(sorted, cache_, lora_, state_, fwd);
    rows.clear();
    logit_rows.clear();
    for (size_t k = 0; k < sorted.size(); ++k) {
      const size_t ri = chunk.requests[k];
      const auto& r = requests[ri];
      for (int32_t n = 0; n < r.num_samples; ++n) {
        Live s;
        s.request = ri;
        s.sample = n;
        s.seq = cache_.fork(sorted[k].seq);  // shares the prompt's blocks
        s.slot = r.slot;
        s.seed = engine::sample_seed(r.params.seed, uint64_t(n));
        s.prompt_last = r.prompt.back();
        s.done = r.params.max_tokens == 0;
        live.push_back(std::move(s));
        if (!live.back().done) {
          rows.push_back(live.size() - 1);
          logit_rows.push_back(int32_t(k));
        }
      }
    }
    sample_step(requests, live, rows, logit_rows);
  }
  for (SeqId& seq : prompt_seqs) {
    cache_.release(seq);
    seq = -1;
  }

  // Decode: one token per live sequence per step, all adapters in one batch.
  DeviceForwardOptions decode_fwd = fwd;
  decode_fwd.use_graph = device_options_.use_graph;
  std::vector<BatchSequence> batch;
  std::vector<int32_t> step_tokens;
  const auto last_token = [](const Live& l) { return l.last_token; };
  while (engine::next_decode_step(live, last_token, rows, step_tokens, batch)) {
    logit_rows.resize(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) logit_rows[k] = int32_t(k);
    model_.forward(batch, cache_, lora_, state_, decode_fwd);
    sample_step(requests, live, rows, logit_rows);
  }
}

}  // namespace spindle::engine_cuda
