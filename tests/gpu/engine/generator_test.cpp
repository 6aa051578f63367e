// Generation on the GPU: llama2.c's greedy output of the real stories260K model reproduced
// exactly in fp32 mode (and a long prefix of it in bf16), greedy batches with adapters and
// forked samples equal the CPU engine::Generator, seeded sampling reproducible and independent
// of the batch, stops, clean cache after errors.

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "gpu_fixtures.h"
#include "shared_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/engine/generator.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/sample_stream.h"
#include "spindle/engine_cuda/device_generator.h"

namespace spindle::engine_cuda {
namespace {

using engine::Arch;
using engine::Completion;
using engine::GenerationRequest;
using engine::LoraTarget;
using engine::StopReason;

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Completion greedy_from_bos(const engine::ModelWeights& w, const engine::Tokenizer& tok,
                           Precision p) {
  const DeviceWeights dw(w, p);
  DeviceModel model(dw);
  DeviceKvCache cache(w.config, {.block_size = 16, .n_blocks = 0, .max_seqs = 1}, p);
  DeviceGenerator gen(model, cache, nullptr, &tok);
  GenerationRequest r;
  r.prompt = {1};
  r.params.temperature = 0;
  r.params.max_tokens = 200;
  r.params.stop_token_ids = {1};  // llama2.c stops at BOS
  Completion c = gen.generate({r}).at(0).at(0);
  EXPECT_EQ(cache.live_sequences(), 0);
  EXPECT_EQ(cache.free_blocks(), cache.n_blocks());
  return c;
}

TEST(GpuGenerator, Stories260KGreedyFromBosMatchesLlama2cInFp32) {
  SPINDLE_REQUIRE_GPU();
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  SPINDLE_SHARED_OR_SKIP(tok_path, "models/stories260K/tok512.bin");
  SPINDLE_SHARED_OR_SKIP(golden, "models/stories260K/golden/greedy_200steps_from_BOS.txt");
  const engine::ModelWeights w = engine::load_llama2c(bin);
  const auto tok = engine::load_tokenizer(tok_path);
  const Completion c = greedy_from_bos(w, *tok, Precision::fp32);
  EXPECT_EQ(c.tokens.size(), 200u);
  EXPECT_EQ(c.stop_reason, StopReason::length);
  EXPECT_EQ(c.text + "\n", slurp(golden));
}

TEST(GpuGenerator, Stories260KGreedyFromBosInBf16KeepsALongPrefix) {
  SPINDLE_REQUIRE_GPU();
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  SPINDLE_SHARED_OR_SKIP(tok_path, "models/stories260K/tok512.bin");
  const engine::ModelWeights w = engine::load_llama2c(bin);
  const auto tok = engine::load_tokenizer(tok_path);
  // The reference tokens: the CPU engine's greedy run (equal to the golden text, see
  // tests/unit/model/generator_test.cpp).
  const engine::Model cpu(w);
  engine::KvCache ccache(w.config, {.block_size = 16, .n_blocks = 0, .max_seqs = 1});
  engine::Generator cgen(cpu, ccache, nullptr, tok.get());
  GenerationRequest r;
  r.prompt = {1};
  r.params.temperature = 0;
  r.params.max_tokens = 200;
  r.params.stop_token_ids = {1};
  const Completion want = cgen.generate({r}).at(0).at(0);
  const Completion got = greedy_from_bos(w, *tok, Precision::bf16);
  size_t n = 0;
  while (n < got.tokens.size() && n < want.tokens.size() && got.tokens[n] == want.tokens[n]) ++n;
  std::cout << "[ bf16 ] stories260K greedy: first " << n << " of " << want.tokens.size()
            << " tokens equal the fp32 / llama2.c run\n";
  RecordProperty("bf16_greedy_prefix", int(n));
  EXPECT_GE(n, 20u) << "bf16 text: " << got.text;
  for (unsigned char ch : got.text) {
    EXPECT_TRUE(ch == '\n' || (ch >= 0x20 && ch < 0x7f)) << "unprintable byte " << int(ch);
  }
}

// Greedy requests with adapters, forked samples (num_samples > 1 shares the prompt's blocks and
// copies the partial last block on write) and a base request: tokens equal the CPU generator's,
// logprobs within tolerance; the cache is empty afterwards.
TEST(GpuGenerator, GreedyBatchWithAdaptersAndForksMatchesCpuGenerator) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w = testing::random_weights(testing::gpu_tiny_config(Arch::qwen3), 31);
  const engine::ModelConfig& c = w.config;
  const LoraTarget qv[] = {LoraTarget::q, LoraTarget::v, LoraTarget::up, LoraTarget::lm_head};
  const auto a0 = engine::LoraWeights::random(c, 8, 16, qv, 1, 0.4f, 0.4f);
  const auto a2 = engine::LoraWeights::random(c, 2, 4, qv, 2, 0.4f, 0.4f);
  engine::LoraSlotPool cpool(c, {.max_slots = 3, .max_rank = 8});
  cpool.load(0, a0);
  cpool.load(2, a2);
  DeviceLoraPool gpool(c, {.max_slots = 3, .max_rank = 8});
  gpool.load(0, a0);
  gpool.load(2, a2);

  std::vector<GenerationRequest> reqs(3);
  reqs[0].prompt = {1, 5, 6};
  reqs[0].slot = 2;
  reqs[0].num_samples = 3;
  reqs[0].params.max_tokens = 12;
  reqs[1].prompt = {1, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  reqs[1].params.max_tokens = 9;
  reqs[2].prompt = {1, 40};
  reqs[2].slot = 0;
  reqs[2].num_samples = 2;
  reqs[2].params.max_tokens = 15;
  for (auto& r : reqs) r.params.temperature = 0;

  const engine::Model cpu(w);
  engine::KvCache ccache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 8});
  engine::Generator cgen(cpu, ccache, &cpool, nullptr);
  const auto want = cgen.generate(reqs);

  const DeviceWeights dw(w, Precision::fp32);
  DeviceModel model(dw);
  DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 8}, Precision::fp32);
  DeviceGenerator gen(model, cache, &gpool, nullptr);
  const auto got = gen.generate(reqs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    for (size_t n = 0; n < want[i].size(); ++n) {
      EXPECT_EQ(got[i][n].tokens, want[i][n].tokens) << "request " << i << " sample " << n;
      ASSERT_EQ(got[i][n].logprobs.size(), want[i][n].logprobs.size());
      for (size_t t = 0; t < want[i][n].logprobs.size(); ++t) {
        EXPECT_NEAR(got[i][n].logprobs[t], want[i][n].logprobs[t], 1e-3f)
            << "request " << i << " sample " << n << " token " << t;
      }
      EXPECT_EQ(got[i][n].stop_reason, StopReason::length);
    }
  }
  EXPECT_EQ(cache.live_sequences(), 0);
  EXPECT_EQ(cache.free_blocks(), cache.n_blocks());
}

// Seeded sampling: the same request gives the same tokens again, alone or inside a batch;
// samples of one request differ; a stop token ends a sequence and is kept.
TEST(GpuGenerator, SeededSamplingIsReproducibleAndBatchIndependent) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w = testing::random_weights(testing::gpu_tiny_config(Arch::llama), 8);
  const engine::ModelConfig& c = w.config;
  // fp32, so that a row's logits do not depend on which GEMM shape the batch picked.
  const DeviceWeights dw(w, Precision::fp32);
  DeviceModel model(dw);
  DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 8}, Precision::fp32);
  DeviceGenerator gen(model, cache, nullptr, nullptr);
  GenerationRequest r;
  r.prompt = {1, 17, 23};
  r.num_samples = 3;
  r.params.seed = 42;
  r.params.temperature = 1.0f;
  r.params.top_k = 20;
  r.params.top_p = 0.9f;
  r.params.max_tokens = 10;
  GenerationRequest other;
  other.prompt = {1, 2, 3, 4, 5, 6, 7};
  other.params.seed = 7;
  other.params.max_tokens = 13;
  const auto alone = gen.generate({r});
  const auto again = gen.generate({r});
  const auto mixed = gen.generate({other, r});
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_EQ(alone[0][n].tokens.size(), 10u);
    EXPECT_EQ(alone[0][n].tokens, again[0][n].tokens) << "sample " << n;
    EXPECT_EQ(alone[0][n].tokens, mixed[1][n].tokens) << "sample " << n;
    for (float lp : alone[0][n].logprobs) EXPECT_LE(lp, 0.0f);
  }
  // Samples of one request use different streams. The random tiny model's distribution after
  // this prompt can be peaked enough that top-p 0.9 keeps one token (seen on an H200: all
  // samples 23, 23, ...), so compare samples at a temperature that flattens it to ~uniform.
  GenerationRequest flat = r;
  flat.params.temperature = 100.0f;
  flat.params.top_k = 0;
  flat.params.top_p = 1.0f;
  const auto spread = gen.generate({flat});
  EXPECT_NE(spread[0][0].tokens, spread[0][1].tokens);
  EXPECT_NE(spread[0][1].tokens, spread[0][2].tokens);
  // Stop on a token id: kept with its logprob, sequence ends there.
  r.num_samples = 1;
  r.params.stop_token_ids = {alone[0][0].tokens[4]};
  const auto stopped = gen.generate({r}).at(0).at(0);
  EXPECT_EQ(stopped.stop_reason, StopReason::stop);
  EXPECT_LE(stopped.tokens.size(), 5u);
  EXPECT_EQ(stopped.tokens.back(), alone[0][0].tokens[4]);
  EXPECT_EQ(cache.live_sequences(), 0);
}

TEST(GpuGenerator, BadRequestsAndKvExhaustionLeaveCacheClean) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w = testing::random_weights(testing::gpu_tiny_config(Arch::llama), 2);
  const DeviceWeights dw(w, Precision::fp32);
  DeviceModel model(dw);
  DeviceKvCache cache(w.config, {.block_size = 4, .n_blocks = 6, .max_seqs = 1}, Precision::fp32);
  DeviceGenerator gen(model, cache, nullptr, nullptr);
  GenerationRequest ok;
  ok.prompt = {1};
  GenerationRequest bad = ok;
  bad.slot = 3;
  EXPECT_THROW(gen.generate({ok, bad}), Error);
  bad = ok;
  bad.prompt.clear();
  EXPECT_THROW(gen.generate({bad}), Error);
  bad = ok;
  bad.params.stop_strings = {"x"};  // no tokenizer
  EXPECT_THROW(gen.generate({bad}), Error);
  GenerationRequest big;
  big.prompt = {1, 2, 3};
  big.num_samples = 4;
  big.params.max_tokens = 20;
  EXPECT_THROW(gen.generate({big}), Error);
  EXPECT_EQ(cache.live_sequences(), 0);
  EXPECT_EQ(cache.free_blocks(), 6);
}

}  // namespace
}  // namespace spindle::engine_cuda
