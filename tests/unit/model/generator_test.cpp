// Generation: llama2.c's own greedy output of the real stories260K model, reproduced exactly;
// heterogeneous batches that give every request what it gets alone; stops.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "model_fixtures.h"
#include "shared_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/engine/generator.h"
#include "spindle/engine/loader.h"

namespace spindle::engine {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Generator, Stories260KGreedyFromBosMatchesLlama2c) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  SPINDLE_SHARED_OR_SKIP(tok_path, "models/stories260K/tok512.bin");
  SPINDLE_SHARED_OR_SKIP(golden, "models/stories260K/golden/greedy_200steps_from_BOS.txt");
  const ModelWeights w = load_llama2c(bin);
  const auto tok = load_tokenizer(tok_path);
  const Model model(w);
  KvCache cache(w.config, {.block_size = 16, .n_blocks = 0, .max_seqs = 1});
  Generator gen(model, cache, nullptr, tok.get());
  GenerationRequest r;
  r.prompt = {1};
  r.params.temperature = 0;
  r.params.max_tokens = 200;
  r.params.stop_token_ids = {1};  // llama2.c stops at BOS
  const auto out = gen.generate({r});
  const Completion& c = out.at(0).at(0);
  EXPECT_EQ(c.tokens.size(), 200u);
  EXPECT_EQ(c.stop_reason, StopReason::length);
  EXPECT_EQ(c.text + "\n", slurp(golden));
  EXPECT_EQ(cache.live_sequences(), 0);
  EXPECT_EQ(cache.free_blocks(), cache.n_blocks());
}

TEST(Generator, MixedBatchGivesEachRequestWhatItGetsAlone) {
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::qwen3), 31);
  const ModelConfig& c = w.config;
  LoraSlotPool pool(c, {.max_slots = 3, .max_rank = 8});
  const LoraTarget qv[] = {LoraTarget::q, LoraTarget::v, LoraTarget::up};
  pool.load(0, LoraWeights::random(c, 8, 16, qv, 1, 0.4f, 0.4f));
  pool.load(2, LoraWeights::random(c, 2, 4, qv, 2, 0.4f, 0.4f));
  const Model model(w);
  std::vector<GenerationRequest> reqs(4);
  reqs[0].prompt = {1, 5, 6};
  reqs[0].slot = 2;
  reqs[0].num_samples = 3;
  reqs[0].params.seed = 11;
  reqs[0].params.max_tokens = 12;
  reqs[1].prompt = {1, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  reqs[1].slot = -1;
  reqs[1].params.temperature = 0;
  reqs[1].params.max_tokens = 9;
  reqs[2].prompt = {1, 40};
  reqs[2].slot = 0;
  reqs[2].num_samples = 2;
  reqs[2].params.seed = 5;
  reqs[2].params.top_p = 0.8f;
  reqs[2].params.max_tokens = 15;
  reqs[3].prompt = {1, 5, 6};
  reqs[3].slot = 0;
  reqs[3].params.seed = 11;
  reqs[3].params.top_k = 5;
  reqs[3].params.max_tokens = 7;

  KvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 8});
  Generator gen(model, cache, &pool, nullptr);
  const auto together = gen.generate(reqs);
  ASSERT_EQ(together.size(), 4u);
  EXPECT_EQ(together[0].size(), 3u);
  EXPECT_NE(together[0][0].tokens, together[0][1].tokens);  // independent sample streams
  for (size_t i = 0; i < reqs.size(); ++i) {
    KvCache c1(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 4});
    Generator alone(model, c1, &pool, nullptr);
    const auto solo = alone.generate({reqs[i]});
    for (size_t n = 0; n < together[i].size(); ++n) {
      EXPECT_EQ(together[i][n].tokens, solo[0][n].tokens) << "request " << i << " sample " << n;
      ASSERT_EQ(together[i][n].logprobs.size(), solo[0][n].logprobs.size());
      for (size_t t = 0; t < solo[0][n].logprobs.size(); ++t) {
        EXPECT_NEAR(together[i][n].logprobs[t], solo[0][n].logprobs[t], 1e-4f);
      }
      EXPECT_EQ(together[i][n].tokens.size(), size_t(reqs[i].params.max_tokens));
    }
  }
  EXPECT_EQ(cache.live_sequences(), 0);
  EXPECT_EQ(cache.free_blocks(), cache.n_blocks());
}

TEST(Generator, StopsOnStopTokenAndStopString) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  SPINDLE_SHARED_OR_SKIP(tok_path, "models/stories260K/tok512.bin");
  const ModelWeights w = load_llama2c(bin);
  const auto tok = load_tokenizer(tok_path);
  const Model model(w);
  KvCache cache(w.config, {.block_size = 16, .n_blocks = 0, .max_seqs = 2});
  Generator gen(model, cache, nullptr, tok.get());
  GenerationRequest r;
  r.prompt = tok->encode("Once upon a time");
  r.params.temperature = 0;
  r.params.max_tokens = 100;
  r.params.stop_strings = {"Lily"};
  const auto a = gen.generate({r}).at(0).at(0);
  EXPECT_EQ(a.stop_reason, StopReason::stop);
  EXPECT_EQ(a.text.find("Lily"), std::string::npos);
  EXPECT_LT(a.tokens.size(), 100u);
  // The same run without the stop string, cut at the first token that completed "Lily".
  r.params.stop_strings.clear();
  const auto b = gen.generate({r}).at(0).at(0);
  EXPECT_NE(b.text.find("Lily"), std::string::npos);
  EXPECT_EQ(a.text, b.text.substr(0, b.text.find("Lily")));
  // Stop on a token id: the token is kept (with its logprob), its text is not.
  r.params.stop_token_ids = {b.tokens[3]};
  const auto d = gen.generate({r}).at(0).at(0);
  EXPECT_EQ(d.stop_reason, StopReason::stop);
  EXPECT_LE(d.tokens.size(), 4u);
  EXPECT_EQ(d.tokens.back(), b.tokens[3]);
  EXPECT_EQ(d.logprobs.size(), d.tokens.size());
}

TEST(Generator, RejectsBadRequestsBeforeAnyWork) {
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::llama), 2);
  const Model model(w);
  KvCache cache(w.config, {.block_size = 4, .n_blocks = 0, .max_seqs = 1});
  Generator gen(model, cache, nullptr, nullptr);
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
  EXPECT_EQ(cache.live_sequences(), 0);
}

TEST(Generator, KvExhaustionMidRunLeavesCacheClean) {
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::llama), 2);
  const Model model(w);
  KvCache cache(w.config, {.block_size = 4, .n_blocks = 6, .max_seqs = 1});
  Generator gen(model, cache, nullptr, nullptr);
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.num_samples = 4;
  r.params.max_tokens = 20;
  EXPECT_THROW(gen.generate({r}), Error);
  EXPECT_EQ(cache.live_sequences(), 0);
  EXPECT_EQ(cache.free_blocks(), 6);
}

}  // namespace
}  // namespace spindle::engine
