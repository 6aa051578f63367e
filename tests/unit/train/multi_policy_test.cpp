// K policies in one forward/backward pass get exactly what each gets alone: gradients,
// losses and the weights after optimizer steps. And a new PEFT-initialised adapter equals the
// base.

#include <gtest/gtest.h>

#include "../model/model_fixtures.h"
#include "shared_fixtures.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/engine/trainer.h"

namespace spindle::engine {
namespace {

// Every target; LoraWeights::random and init_lora skip those the architecture lacks.
constexpr auto kAll = kAllLoraTargets;

using spindle::testing::max_abs;
using spindle::testing::max_abs_diff;

void check_k_adapters_in_one_pass(Arch arch, bool router_aux = false) {
  ModelConfig config = testing::tiny_config(arch);
  config.moe.router_aux_loss = router_aux;
  config.moe.aux_loss_coef = 0.5f;
  const ModelWeights w = testing::random_weights(config, 71);
  const ModelConfig& c = w.config;
  const Model model(w);
  constexpr int K = 4;
  const int64_t ranks[K] = {2, 8, 1, 4};
  std::vector<LoraWeights> init;
  for (int k = 0; k < K; ++k) {
    std::vector<LoraTarget> targets(std::begin(kAll), std::end(kAll));
    if (k == 2) targets = {LoraTarget::v, LoraTarget::kv_b, LoraTarget::down};
    init.push_back(LoraWeights::random(c, ranks[k], 2.0f * float(ranks[k]), targets, 100 + k,
                                       0.2f, 0.1f));
  }
  std::vector<std::vector<TrainDatum>> per_policy(K);
  std::mt19937 rng(3);
  for (int k = 0; k < K; ++k) {
    for (int d = 0; d < 2; ++d) {
      TrainDatum datum;
      datum.slot = k;
      const size_t n = 3 + size_t((k * 5 + d * 3) % 9);
      for (size_t t = 0; t < n; ++t) {
        datum.input_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
        datum.target_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
      }
      per_policy[size_t(k)].push_back(datum);
    }
  }
  const AdamParams adam{.learning_rate = 1e-2f, .weight_decay = 0.01f, .grad_clip_norm = 1.0f};

  // Together: one batch holding every policy's data, interleaved.
  LoraSlotPool pool(c, {.max_slots = K, .max_rank = 8});
  LoraTrainer together(model, pool);
  for (int k = 0; k < K; ++k) together.attach(k, init[size_t(k)].clone());
  std::vector<TrainDatum> mixed;
  for (int d = 0; d < 2; ++d)
    for (int k = K - 1; k >= 0; --k) mixed.push_back(per_policy[size_t(k)][size_t(d)]);
  for (int step = 0; step < 3; ++step) {
    together.forward_backward(mixed, LossFn::cross_entropy);
    if (step == 0) {
      // Compare gradients before any update.
      for (int k = 0; k < K; ++k) {
        LoraSlotPool alone_pool(c, {.max_slots = K, .max_rank = 8});
        LoraTrainer alone(model, alone_pool);
        alone.attach(k, init[size_t(k)].clone());
        alone.forward_backward(per_policy[size_t(k)], LossFn::cross_entropy);
        EXPECT_LE(max_abs_diff(together.grads(k), alone.grads(k)),
                  1e-5f * std::max(1.0f, max_abs(alone.grads(k))))
            << "policy " << k;
      }
    }
    for (int k = 0; k < K; ++k) together.optim_step(k, adam);
  }
  // Alone: each policy trained by itself for the same three steps.
  for (int k = 0; k < K; ++k) {
    LoraSlotPool alone_pool(c, {.max_slots = K, .max_rank = 8});
    LoraTrainer alone(model, alone_pool);
    alone.attach(k, init[size_t(k)].clone());
    for (int step = 0; step < 3; ++step) {
      alone.forward_backward(per_policy[size_t(k)], LossFn::cross_entropy);
      alone.optim_step(k, adam);
    }
    EXPECT_LE(max_abs_diff(together.weights(k), alone.weights(k)), 1e-5f) << "policy " << k;
    EXPECT_GT(max_abs_diff(together.weights(k), init[size_t(k)]), 1e-3f) << "policy " << k;
  }
}

TEST(MultiPolicy, KAdaptersInOnePassEqualEachAlone) { check_k_adapters_in_one_pass(Arch::qwen3); }

// Qwen3-MoE with LoRA on the routed experts: the sparse layers' rows regroup by (expert, slot)
// in the forward and the backward, and each policy still gets exactly its own gradients.
TEST(MultiPolicy, KAdaptersOnRoutedExpertsInOnePassEqualEachAlone) {
  check_k_adapters_in_one_pass(Arch::qwen3_moe);
}

// DeepSeek-V3: MLA's targets, the shared and the routed experts, the sigmoid router.
TEST(MultiPolicy, KAdaptersOnDeepseekV3InOnePassEqualEachAlone) {
  check_k_adapters_in_one_pass(Arch::deepseek_v3);
}

// With the router's aux loss on: it is taken per policy (over that policy's tokens), so one
// pass still gives each policy exactly what it gets alone.
TEST(MultiPolicy, RouterAuxLossIsPerPolicy) {
  check_k_adapters_in_one_pass(Arch::qwen3_moe, /*router_aux=*/true);
}

TEST(MultiPolicy, NewAdapterEqualsTheBase) {
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::llama), 72);
  const Model model(w);
  LoraSlotPool pool(w.config, {.max_slots = 1, .max_rank = 8});
  pool.load(0, init_lora(w.config, 8, 16.0f, kAll, 1));
  KvCache cache(w.config, {.block_size = 4, .n_blocks = 0, .max_seqs = 2});
  const std::vector<int32_t> p = {1, 7, 3, 9, 4};
  ForwardState st;
  const BatchSequence b[2] = {{cache.create(), p, -1}, {cache.create(), p, 0}};
  model.forward(b, cache, &pool, st);
  for (int64_t v = 0; v < w.config.vocab_size; ++v) EXPECT_EQ(st.logits.row(0)[v], st.logits.row(1)[v]);
  // A follows PEFT's Kaiming-uniform bound 1/√d_in; B is zero.
  const auto a = init_lora(w.config, 8, 16.0f, kAll, 1);
  const float bound = 1.0f / std::sqrt(float(w.config.dim));
  float max_a = 0;
  for (float x : a.modules[0][0].A.span()) max_a = std::max(max_a, std::abs(x));
  EXPECT_LE(max_a, bound);
  EXPECT_GT(max_a, 0.8f * bound);
  for (float x : a.modules[0][0].B.span()) EXPECT_EQ(x, 0.0f);
}

TEST(Sft, Stories260KThirtyStepsLowerTheLoss) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  SPINDLE_SHARED_OR_SKIP(tok_path, "models/stories260K/tok512.bin");
  const ModelWeights w = load_llama2c(bin);
  const auto tok = load_tokenizer(tok_path);
  const Model model(w);
  LoraSlotPool pool(w.config, {.max_slots = 1, .max_rank = 8});
  LoraTrainer trainer(model, pool);
  trainer.attach(0, init_lora(w.config, 8, 16.0f, kAll, 2));
  // Unusual text the base has not seen: the adapter must learn it.
  const std::vector<std::string> rows = {"The purple robot sang to the moon every night.",
                                         "Zog the purple robot loved to sing and dance."};
  std::vector<TrainDatum> batch;
  for (const auto& r : rows) {
    const auto ids = tok->encode(r);
    TrainDatum d;
    d.slot = 0;
    d.input_tokens.assign(ids.begin(), ids.end() - 1);
    d.target_tokens.assign(ids.begin() + 1, ids.end());
    batch.push_back(d);
  }
  const double first = trainer.forward(batch, LossFn::cross_entropy).metrics.loss;
  for (int step = 0; step < 30; ++step) {
    trainer.forward_backward(batch, LossFn::cross_entropy);
    trainer.optim_step(0, {.learning_rate = 1e-2f});
  }
  const double last = trainer.forward(batch, LossFn::cross_entropy).metrics.loss;
  EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
}

}  // namespace
}  // namespace spindle::engine

namespace spindle::engine {
namespace {

TEST(MultiPolicy, GradientsAccumulateAcrossCallsUntilTheStep) {
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::llama), 73);
  const Model model(w);
  const LoraWeights init = LoraWeights::random(w.config, 4, 8.0f, kAll, 5, 0.2f, 0.1f);
  std::vector<TrainDatum> batch(3);
  std::mt19937 rng(4);
  for (auto& d : batch) {
    d.slot = 0;
    for (int t = 0; t < 6; ++t) {
      d.input_tokens.push_back(int32_t(rng() % 97));
      d.target_tokens.push_back(int32_t(rng() % 97));
    }
  }
  LoraSlotPool p1(w.config, {.max_slots = 1, .max_rank = 4});
  LoraSlotPool p2(w.config, {.max_slots = 1, .max_rank = 4});
  LoraTrainer once(model, p1), twice(model, p2);
  once.attach(0, init.clone());
  twice.attach(0, init.clone());
  once.forward_backward(batch, LossFn::cross_entropy);
  twice.forward_backward(std::span(batch).first(1), LossFn::cross_entropy);
  twice.forward_backward(std::span(batch).subspan(1), LossFn::cross_entropy);
  EXPECT_LE(max_abs_diff(once.grads(0), twice.grads(0)),
            1e-5f * std::max(1.0f, max_abs(once.grads(0))));
  once.optim_step(0, {.learning_rate = 1e-2f});
  twice.optim_step(0, {.learning_rate = 1e-2f});
  EXPECT_LE(max_abs_diff(once.weights(0), twice.weights(0)), 1e-6f);
  float max_grad = 0;  // the step zeroes the gradient sums
  for (const auto& layer : twice.grads(0).modules)
    for (const auto& p : layer)
      for (const Tensor* t : {&p.A, &p.B})
        for (float x : t->span()) max_grad = std::max(max_grad, std::abs(x));
  EXPECT_EQ(max_grad, 0.0f);
}

}  // namespace
}  // namespace spindle::engine
