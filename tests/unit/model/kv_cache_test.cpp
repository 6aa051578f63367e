// Paged KV cache: block accounting, fork sharing, copy-on-write, release.

#include <gtest/gtest.h>

#include "model_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/engine/kv_cache.h"
#include "spindle/engine/model.h"

namespace spindle::engine {
namespace {

TEST(KvCache, ForkSharesBlocksAndCopiesOnlyAPartialLastBlock) {
  const ModelConfig c = testing::tiny_config(Arch::llama);
  KvCache cache(c, {.block_size = 4, .n_blocks = 10, .max_seqs = 1});
  const SeqId a = cache.create();
  std::vector<int64_t> slots;
  cache.append(a, 6, slots);  // 2 blocks, the second half full
  EXPECT_EQ(cache.free_blocks(), 8);
  const SeqId b = cache.fork(a);
  const SeqId d = cache.fork(a);
  EXPECT_EQ(cache.free_blocks(), 8);  // forks share everything
  EXPECT_EQ(cache.block_table(b), cache.block_table(a));
  EXPECT_EQ(cache.blocks_needed(b, 1), 1);  // copy-on-write of the shared partial block
  slots.clear();
  cache.append(b, 1, slots);
  EXPECT_EQ(cache.free_blocks(), 7);
  EXPECT_EQ(cache.block_table(b)[0], cache.block_table(a)[0]);  // full block still shared
  EXPECT_NE(cache.block_table(b)[1], cache.block_table(a)[1]);
  EXPECT_EQ(slots[0], int64_t(cache.block_table(b)[1]) * 4 + 2);
  cache.release(a);
  cache.release(b);
  EXPECT_EQ(cache.free_blocks(), 8);  // d still holds the two original blocks
  cache.release(d);
  EXPECT_EQ(cache.free_blocks(), 10);
  EXPECT_EQ(cache.live_sequences(), 0);
  EXPECT_THROW(cache.length(a), Error);
}

TEST(KvCache, RefusesWhenFullAndStaysUnchanged) {
  const ModelConfig c = testing::tiny_config(Arch::llama);
  KvCache cache(c, {.block_size = 4, .n_blocks = 2, .max_seqs = 1});
  const SeqId a = cache.create();
  std::vector<int64_t> slots;
  EXPECT_THROW(cache.append(a, 9, slots), Error);
  EXPECT_EQ(cache.length(a), 0);
  EXPECT_EQ(cache.free_blocks(), 2);
  cache.append(a, 8, slots);
  EXPECT_EQ(cache.free_blocks(), 0);
}

TEST(KvCache, ForkedSamplesSeeThePromptAndDivergeCorrectly) {
  // Prompt prefilled once, two forks decode different tokens; each equals a fresh sequence
  // that was fed prompt + its own token.
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::qwen3), 8);
  const Model model(w);
  KvCache cache(w.config, {.block_size = 4, .n_blocks = 32, .max_seqs = 1});
  const std::vector<int32_t> prompt = {1, 4, 9, 16, 25, 36};
  ForwardState st;
  const SeqId p = cache.create();
  const BatchSequence pb{p, prompt, -1};
  model.forward({&pb, 1}, cache, nullptr, st);
  const SeqId f1 = cache.fork(p), f2 = cache.fork(p);
  const int32_t t1 = 7, t2 = 70;
  const BatchSequence both[2] = {{f1, {&t1, 1}, -1}, {f2, {&t2, 1}, -1}};
  model.forward(both, cache, nullptr, st);
  for (int k = 0; k < 2; ++k) {
    std::vector<int32_t> full = prompt;
    full.push_back(k == 0 ? t1 : t2);
    KvCache fresh(w.config, {.block_size = 4, .n_blocks = 32, .max_seqs = 1});
    ForwardState st1;
    const BatchSequence fb{fresh.create(), full, -1};
    model.forward({&fb, 1}, fresh, nullptr, st1);
    for (int64_t v = 0; v < w.config.vocab_size; ++v) {
      EXPECT_NEAR(st.logits.row(k)[v], st1.logits.row(0)[v], 1e-5f);
    }
  }
}

}  // namespace
}  // namespace spindle::engine
