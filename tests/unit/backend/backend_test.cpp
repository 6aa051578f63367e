// The execution-backend interface (engine/backend.h), one body per behaviour, run on every
// backend (device_under_test.h): the CPU engine (engine::Model, LoraTrainer) driven directly is
// the independent reference. On the CPU backend the comparisons are exact; on CUDA (f32) they
// hold to the stated tolerances.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../model/model_fixtures.h"
#include "device_under_test.h"
#include "spindle/engine/backend_cpu.h"
#include "spindle/engine/kv_cache.h"
#include "spindle/engine/model.h"
#include "spindle/engine/trainer.h"

namespace spindle::engine {
namespace {

using spindle::testing::backend_under_test;
using spindle::testing::max_abs_diff;
using spindle::testing::testing_cpu;

constexpr LoraTarget kAll[] = {LoraTarget::q,  LoraTarget::k,    LoraTarget::v,
                               LoraTarget::o,  LoraTarget::gate, LoraTarget::up,
                               LoraTarget::down, LoraTarget::lm_head};

// Tolerance of a backend value against the CPU reference: f32 rounding of differently ordered
// sums (a batched GEMM picks its kernel by row count, so even the CPU backend's batch differs
// from a sequence alone by ulps), wider on CUDA (other kernels, fused reductions).
float tol(float scale) { return (testing_cpu() ? 1e-5f : 2e-4f) * std::max(1.0f, scale); }

ModelWeights tiny_weights(uint64_t seed) {
  ModelConfig c = spindle::testing::tiny_config(Arch::qwen3);
  c.head_dim = 16;  // the CUDA attention kernels take multiples of 8
  return spindle::testing::random_weights(c, seed);
}

std::vector<int32_t> tokens(size_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}


TEST(ExecutionBackend, ReportsItsDeviceDtypeAndMemory) {
  const ModelWeights w = tiny_weights(1);
  const auto backend = backend_under_test(w);
  EXPECT_EQ(backend->device().name(), testing_cpu() ? "cpu" : "cuda:0");
  EXPECT_EQ(backend->dtype(), DType::f32);
  const MemoryReport m = backend->memory();
  EXPECT_EQ(m.base_bytes, w.bytes());  // f32 on either device: the same bytes
  EXPECT_GT(m.total_bytes, 0u);
  EXPECT_LE(m.free_bytes, m.total_bytes);
  EXPECT_FALSE(m.device_name.empty());
  const auto pool = backend->make_slot_pool({.max_slots = 3, .max_rank = 4});
  const auto kv = backend->make_kv_pool({.block_size = 16, .n_blocks = 8});
  EXPECT_EQ(pool->device(), backend->device());
  EXPECT_EQ(kv->device(), backend->device());
  EXPECT_GT(pool->bytes(), 0u);
  EXPECT_EQ(kv->n_blocks(), 8);
  EXPECT_EQ(kv->free_blocks(), 8);
}

// A heterogeneous batch (base rows and two adapters, prefill and decode) through the backend's
// runner equals the CPU Model running each sequence alone.
TEST(ExecutionBackend, HeterogeneousForwardEqualsTheCpuEngineAlone) {
  const ModelWeights w = tiny_weights(2);
  const ModelConfig& c = w.config;
  const auto backend = backend_under_test(w);
  const LoraWeights a = LoraWeights::random(c, 4, 8.0f, kAll, 5, 0.3f, 0.3f);
  const LoraWeights b = LoraWeights::random(c, 2, 4.0f, kAll, 6, 0.3f, 0.3f);
  const auto pool = backend->make_slot_pool({.max_slots = 3, .max_rank = 4});
  pool->load(0, a);
  pool->load(2, b);
  EXPECT_TRUE(pool->occupied(0));
  EXPECT_FALSE(pool->occupied(1));
  EXPECT_EQ(pool->first_free(), 1);
  const auto kv = backend->make_kv_pool({.block_size = 16, .n_blocks = 16});
  const auto runner = backend->make_runner();

  const std::vector<std::vector<int32_t>> prompts = {tokens(7, 1, c.vocab_size),
                                                     tokens(3, 2, c.vocab_size),
                                                     tokens(19, 3, c.vocab_size)};
  const int32_t slots[] = {0, -1, 2};
  std::vector<SeqId> seqs;
  std::vector<BatchSequence> batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs.push_back(kv->create());
    batch.push_back({seqs[i], prompts[i], slots[i]});
  }
  const LogitsView got = runner->forward(batch, *kv, pool.get(), LogitsFor::last_token);
  ASSERT_EQ(got.rows, 3);
  ASSERT_EQ(got.vocab, c.vocab_size);
  std::vector<std::vector<float>> first(3);
  for (int64_t i = 0; i < 3; ++i) first[size_t(i)].assign(got.row(i), got.row(i) + c.vocab_size);
  // One decode step for every sequence: all-token logits of one row each.
  std::vector<int32_t> next = {5, 6, 7};
  batch.clear();
  for (size_t i = 0; i < 3; ++i) batch.push_back({seqs[i], {&next[i], 1}, slots[i]});
  const LogitsView dec = runner->forward(batch, *kv, pool.get(), LogitsFor::all_tokens);
  ASSERT_EQ(dec.rows, 3);

  const Model model(w);
  for (size_t i = 0; i < prompts.size(); ++i) {
    LoraSlotPool solo(c, {.max_slots = 1, .max_rank = 4});
    if (slots[i] >= 0) solo.load(0, slots[i] == 0 ? a : b);
    KvCache cache(c, {.block_size = 16, .n_blocks = 0, .max_seqs = 1});
    ForwardState st;
    const SeqId s = cache.create();
    std::vector<int32_t> all = prompts[i];
    model.forward(std::vector<BatchSequence>{{s, all, slots[i] >= 0 ? 0 : -1}}, cache, &solo, st);
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      ASSERT_NEAR(first[i][size_t(v)], st.logits.row(0)[v], tol(std::abs(st.logits.row(0)[v])))
          << "sequence " << i << " prefill logit " << v;
    }
    model.forward(std::vector<BatchSequence>{{s, {&next[i], 1}, slots[i] >= 0 ? 0 : -1}}, cache,
                  &solo, st);
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      ASSERT_NEAR(dec.row(int64_t(i))[v], st.logits.row(0)[v], tol(std::abs(st.logits.row(0)[v])))
          << "sequence " << i << " decode logit " << v;
    }
  }
  // Forked sequences share blocks until they diverge.
  const int64_t before = kv->free_blocks();
  const SeqId f = kv->fork(seqs[2]);
  EXPECT_EQ(kv->length(f), kv->length(seqs[2]));
  EXPECT_EQ(kv->free_blocks(), before);
  for (SeqId s : seqs) kv->release(s);
  kv->release(f);
  EXPECT_EQ(kv->free_blocks(), kv->n_blocks());
}

TEST(ExecutionBackend, ForwardRefusesABadBatchBeforeTouchingTheCache) {
  const ModelWeights w = tiny_weights(3);
  const auto backend = backend_under_test(w);
  const auto pool = backend->make_slot_pool({.max_slots = 2, .max_rank = 4});
  const auto kv = backend->make_kv_pool({.block_size = 16, .n_blocks = 4});
  const auto runner = backend->make_runner();
  const SeqId s = kv->create();
  std::vector<int32_t> bad = {1, int32_t(w.config.vocab_size)};  // out of the vocabulary
  try {
    runner->forward(std::vector<BatchSequence>{{s, bad, -1}}, *kv, pool.get(),
                    LogitsFor::last_token);
    ADD_FAILURE() << "an out-of-vocab token was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  }
  std::vector<int32_t> ok = {1, 2};
  try {
    runner->forward(std::vector<BatchSequence>{{s, ok, 1}}, *kv, pool.get(),
                    LogitsFor::last_token);  // slot 1 is empty
    ADD_FAILURE() << "an empty slot was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  }
  EXPECT_EQ(kv->length(s), 0);
  EXPECT_EQ(kv->free_blocks(), 4);
}

// Pools of another backend are refused by name, not misread.
TEST(ExecutionBackend, RefusesAPoolOfAnotherBackend) {
  const ModelWeights w = tiny_weights(4);
  const auto backend = backend_under_test(w);
  const auto other = make_cpu_backend(w);
  if (other->device() == backend->device()) {
    // Two CPU backends: their pools are interchangeable by design (same memory), so check
    // only that a trainer accepts the other's pool.
    const auto pool = other->make_slot_pool({.max_slots = 1, .max_rank = 2});
    EXPECT_NO_THROW(backend->make_trainer(*pool));
    return;
  }
  const auto pool = other->make_slot_pool({.max_slots = 1, .max_rank = 2});
  try {
    backend->make_trainer(*pool);
    ADD_FAILURE() << "a CPU pool was accepted by a " << backend->device().name() << " backend";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

std::vector<TrainDatum> train_batch(const ModelConfig& c, int32_t slots, uint32_t seed) {
  std::vector<TrainDatum> data;
  std::mt19937 rng(seed);
  for (int32_t k = 0; k < slots; ++k) {
    for (int d = 0; d < 2; ++d) {
      TrainDatum datum;
      datum.slot = k;
      const size_t n = 4 + size_t((k * 5 + d * 3) % 9);
      datum.input_tokens = tokens(n, rng(), c.vocab_size);
      datum.target_tokens = tokens(n, rng(), c.vocab_size);
      data.push_back(datum);
    }
  }
  return data;
}

// K policies through the backend's trainer: loss, logprobs and the weights after two steps
// equal engine::LoraTrainer's on the CPU.
TEST(ExecutionBackend, TrainerEqualsTheCpuTrainer) {
  const ModelWeights w = tiny_weights(5);
  const ModelConfig& c = w.config;
  const auto backend = backend_under_test(w);
  constexpr int K = 2;
  const LoraWeights init[K] = {LoraWeights::random(c, 4, 8.0f, kAll, 11, 0.2f, 0.1f),
                               LoraWeights::random(c, 2, 4.0f, kAll, 12, 0.2f, 0.1f)};
  // eps well above rounding: with a near-zero eps the first update is lr·sign(g), and an element
  // whose gradient is below the two devices' rounding difference would land 2·lr apart.
  const AdamParams adam{
      .learning_rate = 1e-2f, .eps = 1e-4f, .weight_decay = 0.01f, .grad_clip_norm = 1.0f};

  const auto pool = backend->make_slot_pool({.max_slots = K, .max_rank = 4});
  const auto trainer = backend->make_trainer(*pool);
  const Model model(w);
  LoraSlotPool ref_pool(c, {.max_slots = K, .max_rank = 4});
  LoraTrainer ref(model, ref_pool);
  for (int k = 0; k < K; ++k) {
    trainer->attach(k, init[k].clone(), AdamW());
    ref.attach(k, init[k].clone());
  }
  for (int step = 0; step < 2; ++step) {
    const auto batch = train_batch(c, K, 40 + uint32_t(step));
    const ForwardBackwardOutput got = trainer->forward_backward(batch, LossFn::cross_entropy, {});
    const ForwardBackwardOutput want = ref.forward_backward(batch, LossFn::cross_entropy, {});
    EXPECT_NEAR(got.metrics.loss, want.metrics.loss, tol(float(want.metrics.loss)));
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < want.logprobs.size(); ++i)
      for (size_t t = 0; t < want.logprobs[i].size(); ++t)
        EXPECT_NEAR(got.logprobs[i][t], want.logprobs[i][t], tol(std::abs(want.logprobs[i][t])));
    for (int k = 0; k < K; ++k) {
      const OptimStepResult g = trainer->optim_step(k, adam);
      const OptimStepResult r = ref.optim_step(k, adam);
      EXPECT_NEAR(g.grad_norm, r.grad_norm, tol(float(r.grad_norm)));
      EXPECT_EQ(g.step, r.step);
      EXPECT_EQ(trainer->step_count(k), step + 1);
    }
  }
  for (int k = 0; k < K; ++k) {
    EXPECT_LE(max_abs_diff(trainer->weights(k), ref.weights(k)), tol(1.0f)) << "policy " << k;
  }
}

// share_weights (a save's snapshot) is the weights as trained so far, and stays exactly that
// while the session trains on: the next steps change the session, never the shared copy.
TEST(ExecutionBackend, SharedWeightsStayAsTheyWereWhileTrainingGoesOn) {
  const ModelWeights w = tiny_weights(7);
  const ModelConfig& c = w.config;
  const auto backend = backend_under_test(w);
  const auto pool = backend->make_slot_pool({.max_slots = 1, .max_rank = 4});
  const auto trainer = backend->make_trainer(*pool);
  trainer->attach(0, LoraWeights::random(c, 4, 8.0f, kAll, 31, 0.2f, 0.1f), AdamW());
  const AdamParams adam{.learning_rate = 1e-2f};
  auto step = [&](uint32_t seed) {
    auto batch = train_batch(c, 1, seed);
    for (auto& d : batch) d.slot = 0;
    trainer->forward_backward(batch, LossFn::cross_entropy, {});
    trainer->optim_step(0, adam);
  };
  step(70);
  const LoraWeights at_share = trainer->weights(0);
  const std::shared_ptr<const LoraWeights> shared = trainer->share_weights(0);
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(max_abs_diff(*shared, at_share), 0.0f);
  step(71);
  EXPECT_EQ(max_abs_diff(*shared, at_share), 0.0f) << "a step wrote into the shared weights";
  EXPECT_GT(max_abs_diff(trainer->weights(0), at_share), 1e-4f) << "the session did not train";
  // Shared again, twice without a step in between, then stepped again: each copy keeps its
  // moment, and training after a share goes on from the trained weights (not from the copy).
  const LoraWeights second = trainer->weights(0);
  const auto shared2 = trainer->share_weights(0);
  const auto shared3 = trainer->share_weights(0);
  step(72);
  step(73);
  EXPECT_EQ(max_abs_diff(*shared2, second), 0.0f);
  EXPECT_EQ(max_abs_diff(*shared3, second), 0.0f);
  EXPECT_EQ(max_abs_diff(*shared, at_share), 0.0f);
  EXPECT_EQ(trainer->step_count(0), 4);
}

// On the CPU engine the shared weights are the trainer's own, not a copy: a save's snapshot
// costs the engine thread nothing. The copy is made by the next step, and only then.
TEST(ExecutionBackend, CpuTrainerSharesItsWeightsUntilTheNextStep) {
  const ModelWeights w = tiny_weights(8);
  const ModelConfig& c = w.config;
  const Model model(w);
  LoraSlotPool pool(c, {.max_slots = 1, .max_rank = 4});
  LoraTrainer trainer(model, pool);
  trainer.attach(0, LoraWeights::random(c, 4, 8.0f, kAll, 32, 0.2f, 0.1f));
  const auto shared = trainer.share_weights(0);
  EXPECT_EQ(shared.get(), &trainer.weights(0));
  auto batch = train_batch(c, 1, 74);
  trainer.forward_backward(batch, LossFn::cross_entropy, {});
  trainer.optim_step(0, {.learning_rate = 1e-2f});
  EXPECT_NE(shared.get(), &trainer.weights(0));
  // Not shared since: the next step trains in place.
  const LoraWeights* now = &trainer.weights(0);
  trainer.forward_backward(batch, LossFn::cross_entropy, {});
  trainer.optim_step(0, {.learning_rate = 1e-2f});
  EXPECT_EQ(now, &trainer.weights(0));
}

// A state saved from the backend's session (weights, AdamW moments, step) resumes on the CPU
// trainer and back, in AdamW's one safetensors layout: the next step is the one the session
// would have taken, and a state round trip is bit-exact. On a routed-experts base the adapter
// and its state include every expert's gate/up/down (packed names).
void check_state_portable(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const auto backend = backend_under_test(w);
  const LoraWeights init = LoraWeights::random(c, 4, 8.0f, kAll, 21, 0.2f, 0.1f);
  const AdamParams adam{.learning_rate = 1e-2f};
  const auto pool = backend->make_slot_pool({.max_slots = 2, .max_rank = 4});
  const auto trainer = backend->make_trainer(*pool);
  trainer->attach(1, init.clone(), AdamW());
  EXPECT_TRUE(trainer->optimizer(1).moments().empty());  // no step yet: a fresh state
  for (int step = 0; step < 2; ++step) {
    auto batch = train_batch(c, 1, 60 + uint32_t(step));
    for (auto& d : batch) d.slot = 1;
    trainer->forward_backward(batch, LossFn::cross_entropy, {});
    trainer->optim_step(1, adam);
  }
  const LoraWeights saved_w = trainer->weights(1);
  const AdamW saved = trainer->optimizer(1);
  EXPECT_EQ(saved.step_count(), 2);
  // Through the file format the catalog stores (safetensors bytes): bit-exact.
  const AdamW reloaded = AdamW::deserialize(saved.serialize(), "saved state");
  ASSERT_EQ(reloaded.moments().size(), saved.moments().size());
  // (m, v) for A and B of 7 projections per layer plus lm_head (a sparse layer's gate/up/down:
  // its experts' packed tensors).
  ASSERT_EQ(saved.moments().size(), size_t(2 * (7 * c.n_layers + 1)));
  if (c.moe.n_experts > 0) {
    ASSERT_TRUE(saved_w.has_experts());
    EXPECT_EQ(saved.moments().count(lora_expert_param_name(0, LoraTarget::up, 0)), 1u);
  }

  // Resume on the CPU trainer and on a fresh session of the backend; both take the same step.
  const Model model(w);
  LoraSlotPool cpu_pool(c, {.max_slots = 1, .max_rank = 4});
  LoraTrainer cpu(model, cpu_pool);
  cpu.attach(0, saved_w.clone(), AdamW::deserialize(saved.serialize(), "to cpu"));
  trainer->attach(0, saved_w.clone(), AdamW::deserialize(saved.serialize(), "back"));
  // The state read back from the slot it was attached to is bit-exact what was given.
  const AdamW echoed = trainer->optimizer(0);
  EXPECT_EQ(echoed.serialize(), saved.serialize());
  auto batch = train_batch(c, 1, 99);
  for (auto& d : batch) d.slot = 0;
  cpu.forward_backward(batch, LossFn::cross_entropy, {});
  trainer->forward_backward(batch, LossFn::cross_entropy, {});
  const OptimStepResult rc = cpu.optim_step(0, adam);
  const OptimStepResult rb = trainer->optim_step(0, adam);
  EXPECT_EQ(rc.step, 3);
  EXPECT_EQ(rb.step, 3);
  EXPECT_LE(max_abs_diff(cpu.weights(0), trainer->weights(0)), tol(1.0f));
}

TEST(ExecutionBackend, OptimizerStateIsPortableAcrossBackends) { check_state_portable(tiny_weights(6)); }

TEST(ExecutionBackend, OptimizerStateWithRoutedExpertsIsPortableAcrossBackends) {
  ModelConfig c = spindle::testing::tiny_config(Arch::qwen3_moe);
  c.head_dim = 16;
  const ModelWeights w = spindle::testing::random_weights(c, 8);
  check_state_portable(w);
}

TEST(ExecutionBackend, AttachRefusesTheOptimizerStateOfAnotherAdapter) {
  const ModelWeights w = tiny_weights(7);
  const ModelConfig& c = w.config;
  const auto backend = backend_under_test(w);
  const auto pool = backend->make_slot_pool({.max_slots = 1, .max_rank = 8});
  const auto trainer = backend->make_trainer(*pool);
  // A state trained on a rank-2 adapter of the attention projections only.
  const LoraWeights small = LoraWeights::random(c, 2, 4.0f, std::vector{LoraTarget::q}, 1, 0.2f, 0.1f);
  trainer->attach(0, small.clone(), AdamW());
  auto batch = train_batch(c, 1, 7);
  trainer->forward_backward(batch, LossFn::cross_entropy, {});
  trainer->optim_step(0, {});
  const AdamW state = trainer->optimizer(0);
  const LoraWeights other = LoraWeights::random(c, 8, 8.0f, kAll, 2, 0.2f, 0.1f);
  try {
    trainer->attach(0, other.clone(), AdamW::deserialize(state.serialize(), "x"));
    ADD_FAILURE() << "a mismatched optimizer state was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("lora_A.weight"), std::string::npos) << e.what();
  }
  // The session is as it was: it still trains the rank-2 adapter from step 1.
  EXPECT_EQ(trainer->step_count(0), 1);
  EXPECT_EQ(trainer->weights(0).rank, 2);
}

}  // namespace
}  // namespace spindle::engine
