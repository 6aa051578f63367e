#pragma once
// In-process generation on a CUDA device: the twin of engine::Generator (engine/generator.h)
// with batched decode and sampling on the device (kernels::cuda::sample_tokens). Prompts are
// prefilled together (chunked by max_batch_tokens), the n samples of a request fork the
// prompt's KV sequence, and every decode step runs all live sequences across adapters in one
// forward, rows grouped by slot.
//
// Semantics match engine::Generator (validation, stop tokens kept, stop strings cut from the
// text, max_tokens, context end → length, logprob = raw log_softmax). Greedy output equals the
// CPU's for the same logits; seeded sampling draws from the device's Philox streams keyed by
// engine::sample_seed(seed, sample index) and the token index, so it is reproducible and
// independent of the batch, but not the CPU's xoshiro stream.

#include <cstdint>
#include <vector>

#include "spindle/engine/generator.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/engine_cuda/device_model.h"
#include "spindle/kernels/cuda/sampling.h"

namespace spindle::engine_cuda {

struct DeviceGeneratorOptions {
  // Decode steps replay CUDA graphs (DeviceForwardOptions::use_graph); same tokens either way.
  bool use_graph = true;
};

class DeviceGenerator {
 public:
  // `tokenizer` may be null (then stop strings are rejected and text stays empty).
  DeviceGenerator(DeviceModel& model, DeviceKvCache& cache, const DeviceLoraPool* lora,
                  const engine::Tokenizer* tokenizer, engine::GeneratorOptions options = {},
                  DeviceGeneratorOptions device_options = {});

  // One result vector per request, num_samples completions each. Validates every request
  // before any work; nothing stays allocated in the cache after the call (also on error).
  std::vector<std::vector<engine::Completion>> generate(
      const std::vector<engine::GenerationRequest>& requests);

 private:
  struct Live;
  void validate(const engine::GenerationRequest& r, size_t index) const;
  void run(const std::vector<engine::GenerationRequest>& requests, std::vector<Live>& live,
           std::vector<SeqId>& prompt_seqs);
  // Samples one token for each of `rows` from state_.logits rows `logit_rows` (device), then
  // appends them on the host; marks finished sequences done.
  void sample_step(const std::vector<engine::GenerationRequest>& requests,
                   std::vector<Live>& live, const std::vector<size_t>& rows,
                   const std::vector<int32_t>& logit_rows);
  // Appends one sampled token; returns true when the sequence is finished.
  bool accept(Live& s, int32_t token, float logprob, const engine::GenerationRequest& r) const;

  DeviceModel& model_;
  DeviceKvCache& cache_;
  const DeviceLoraPool* lora_;
  const engine::Tokenizer* tokenizer_;
  engine::GeneratorOptions options_;
  DeviceGeneratorOptions device_options_;
  DeviceForwardState state_;
  DeviceTensor sample_logits_;  // logits rows gathered per sampled sequence
  kernels::cuda::DeviceBuffer<int32_t> d_rows_;
  kernels::cuda::DeviceBuffer<kernels::cuda::RowSampling> d_params_;
  kernels::cuda::DeviceBuffer<int32_t> d_tokens_;
  kernels::cuda::DeviceBuffer<float> d_logprobs_;
  kernels::cuda::DeviceBuffer<unsigned char> d_scratch_;
  // Pinned host side of a sampling step: [n] RowSampling params, then [n] tokens, [n] logprobs.
  PinnedBuffer host_io_;
};

}  // namespace spindle::engine_cuda
