// The batched forward against an independent double-precision reference decoder, and the
// forward's input validation.

#include <gtest/gtest.h>

#include "model_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/engine/model.h"

namespace spindle::engine {
namespace {

// Every target; LoraWeights::random skips those the architecture lacks (k/v on MLA, ...).
constexpr auto kAll = kAllLoraTargets;

float max_diff(const float* a, const std::vector<double>& b) {
  float worst = 0;
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, float(std::abs(a[i] - b[i])));
  return worst;
}

class ForwardVsReference : public ::testing::TestWithParam<std::tuple<Arch, bool>> {};

// Prefill a prompt, then decode through the KV cache; every logit row against the reference.
void check_against_reference(const ModelWeights& w, bool with_adapter) {
  const ModelConfig& c = w.config;
  const LoraWeights adapter = LoraWeights::random(c, 4, 8.0f, kAll, 77, 0.3f, 0.3f);
  LoraSlotPool pool(c, {.max_slots = 2, .max_rank = 8});
  pool.load(1, adapter);
  const int32_t slot = with_adapter ? 1 : -1;
  testing::ReferenceModel ref(w, with_adapter ? &adapter : nullptr);

  const Model model(w);
  KvCache cache(c, {.block_size = 3, .n_blocks = 0, .max_seqs = 1});
  const SeqId seq = cache.create();
  const std::vector<int32_t> prompt = {1, 17, 42, 8, 96, 3, 55};
  ForwardState st;
  const BatchSequence b{seq, prompt, slot};
  model.forward({&b, 1}, cache, &pool, st, {.logits = LogitsFor::all_tokens});
  for (size_t t = 0; t < prompt.size(); ++t) {
    EXPECT_LE(max_diff(st.logits.row(int64_t(t)), ref.step(prompt[t])), 2e-4f) << "token " << t;
  }
  // Decode a few more tokens one at a time through the cache.
  for (int32_t tok : {5, 60, 2, 33}) {
    const BatchSequence d{seq, {&tok, 1}, slot};
    model.forward({&d, 1}, cache, &pool, st);
    EXPECT_LE(max_diff(st.logits.row(0), ref.step(tok)), 2e-4f);
  }
  EXPECT_EQ(cache.length(seq), int64_t(prompt.size()) + 4);
}

TEST_P(ForwardVsReference, PrefillThenDecodeMatchesReference) {
  const auto [arch, with_adapter] = GetParam();
  check_against_reference(testing::random_weights(testing::tiny_config(arch), 21), with_adapter);
}

// MLA without a query latent (q_proj, DeepSeek-V2-Lite's layout), half-split RoPE, no YaRN,
// one expert group, plain weights: the other branches of the same graph.
TEST(ForwardVsReferenceMla, QueryProjectionHalfRopeNoGroups) {
  ModelConfig c = testing::tiny_config(Arch::deepseek_v3);
  c.mla.q_lora_rank = 0;
  c.mla.rope_interleave = false;
  c.mla.v_head_dim = 16;  // wider than the qk head: the padding goes the other way
  c.rope_scaling.reset();
  c.moe.n_group = 1;
  c.moe.topk_group = 1;
  c.moe.norm_topk = false;
  c.moe.correction_bias = false;
  c.moe.n_shared_experts = 2;
  for (bool adapter : {false, true})
    check_against_reference(testing::random_weights(c, 22), adapter);
}

// YaRN on a dense model (Qwen3 with rope_scaling yarn): the scaled frequencies and the
// attention factor on q and k.
TEST(ForwardVsReferenceYarn, Qwen3WithYarnScaling) {
  ModelConfig c = testing::tiny_config(Arch::qwen3);
  c.rope_scaling =
      RopeScaling{.type = RopeScalingType::yarn, .factor = 4.0f, .original_max_position = 32};
  EXPECT_NE(rope_attention_factor(c), 1.0f);
  check_against_reference(testing::random_weights(c, 24), /*with_adapter=*/true);
}

// Training forwards (keep_activations) run MLA uncompressed; inference runs it absorbed over
// the latent cache. Same function, so the same logits to rounding.
TEST(ForwardVsReferenceMla, CompressedCacheEqualsUncompressedForm) {
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::deepseek_v3), 23);
  const LoraWeights adapter = LoraWeights::random(w.config, 4, 8.0f, kAll, 78, 0.3f, 0.3f);
  LoraSlotPool pool(w.config, {.max_slots = 2, .max_rank = 8});
  pool.load(1, adapter);
  const Model model(w);
  const std::vector<int32_t> p = {1, 9, 33, 4, 70, 5};
  for (int32_t slot : {-1, 1}) {
    KvCache c1(w.config, {.block_size = 4, .n_blocks = 0, .max_seqs = 1});
    KvCache c2(w.config, {.block_size = 4, .n_blocks = 0, .max_seqs = 1});
    ForwardState a, b;
    const BatchSequence s1{c1.create(), p, slot}, s2{c2.create(), p, slot};
    model.forward({&s1, 1}, c1, &pool, a, {.logits = LogitsFor::all_tokens});
    model.forward({&s2, 1}, c2, &pool, b,
                  {.logits = LogitsFor::all_tokens, .keep_activations = true});
    ASSERT_EQ(a.logits.shape(), b.logits.shape());
    float worst = 0, scale = 0;
    for (int64_t i = 0; i < a.logits.numel(); ++i) {
      worst = std::max(worst, std::abs(a.logits.data()[i] - b.logits.data()[i]));
      scale = std::max(scale, std::abs(a.logits.data()[i]));
    }
    EXPECT_LE(worst, 2e-5f * std::max(1.0f, scale)) << "slot " << slot;
    EXPECT_GT(scale, 0.1f);
  }
}

TEST(KvCacheBytes, LatentCacheHoldsTheLatentAndTheRopeKeyOnly) {
  const ModelConfig c = testing::tiny_config(Arch::deepseek_v3);
  // 3 layers × (kv_lora_rank 12 + qk_rope_head_dim 4) floats, against GQA's 2·H·head_dim.
  EXPECT_EQ(c.kv_bytes_per_token(4), 3 * 16 * 4);
  KvCache cache(c, {.block_size = 4, .n_blocks = 2, .max_seqs = 1});
  EXPECT_EQ(cache.bytes(), size_t(3 * 2 * 4 * 16) * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardVsReference,
                         ::testing::Combine(::testing::Values(Arch::llama, Arch::qwen3,
                                                              Arch::qwen3_moe, Arch::deepseek_v3),
                                            ::testing::Bool()));

TEST(Forward, KeepActivationsGivesSameLogitsAndEveryLayer) {
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::qwen3), 4);
  const Model model(w);
  KvCache c1(w.config, {.block_size = 4, .n_blocks = 0, .max_seqs = 1});
  KvCache c2(w.config, {.block_size = 4, .n_blocks = 0, .max_seqs = 1});
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};
  ForwardState a, b;
  const BatchSequence s1{c1.create(), p, -1}, s2{c2.create(), p, -1};
  model.forward({&s1, 1}, c1, nullptr, a, {.logits = LogitsFor::all_tokens});
  model.forward({&s2, 1}, c2, nullptr, b,
                {.logits = LogitsFor::all_tokens, .keep_activations = true});
  ASSERT_EQ(b.layers.size(), size_t(w.config.n_layers));
  EXPECT_EQ(b.layers[1].x_in.shape(), (Shape{5, w.config.dim}));
  for (int64_t i = 0; i < a.logits.numel(); ++i) ASSERT_EQ(a.logits.data()[i], b.logits.data()[i]);
}

TEST(Forward, RejectsBadInputWithoutTouchingTheCache) {
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::llama), 5);
  const Model model(w);
  KvCache cache(w.config, {.block_size = 4, .n_blocks = 4, .max_seqs = 1});
  const SeqId seq = cache.create();
  ForwardState st;
  auto expect_error = [&](std::vector<int32_t> toks, int32_t slot, ErrorCode code,
                          const std::string& needle) {
    const BatchSequence b{seq, toks, slot};
    try {
      model.forward({&b, 1}, cache, nullptr, st);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(cache.length(seq), 0);
    EXPECT_EQ(cache.free_blocks(), 4);
  };
  expect_error({1, 97}, -1, ErrorCode::invalid_argument, "token id 97");
  expect_error({1, -3}, -1, ErrorCode::invalid_argument, "token id -3");
  expect_error({1, 2}, 0, ErrorCode::invalid_argument, "slot 0");
  expect_error(std::vector<int32_t>(65, 1), -1, ErrorCode::invalid_argument, "context is 64");
  expect_error(std::vector<int32_t>(17, 1), -1, ErrorCode::resource, "KV blocks");
  const std::vector<int32_t> one = {1};
  const BatchSequence dup[2] = {{seq, one, -1}, {seq, one, -1}};
  EXPECT_THROW(model.forward(dup, cache, nullptr, st), Error);
}

TEST(Forward, RopeInvFreqAppliesLlama3Scaling) {
  ModelConfig c = testing::tiny_config(Arch::llama);
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  const auto plain = rope_inv_freq(c);
  c.rope_scaling = RopeScaling{.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                               .original_max_position = 8192};
  const auto scaled = rope_inv_freq(c);
  EXPECT_FLOAT_EQ(scaled[0], plain[0]);            // high frequencies untouched
  EXPECT_FLOAT_EQ(scaled[63], plain[63] / 8.0f);   // low frequencies divided by factor
  EXPECT_FLOAT_EQ(plain[1], 1.0f / std::pow(500000.0f, 2.0f / 128.0f));
}

}  // namespace
}  // namespace spindle::engine
