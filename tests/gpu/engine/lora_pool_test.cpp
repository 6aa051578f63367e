// The device slot pool: loads go through the pool's own stream while a forward on another slot
// is queued on the model's stream, and a forward that uses a just-loaded slot sees the adapter
// (it waits on the slot's event, not on the host); evict frees the slot; bad slots and adapters
// that do not fit are refused with the CPU pool's messages.

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "gpu_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/engine_cuda/device_model.h"

namespace spindle::engine_cuda {
namespace {

using engine::Arch;
using engine::BatchSequence;
using engine::kAllLoraTargets;
using engine::LoraTarget;
using engine::LoraWeights;
using testing::CpuSequence;
using testing::rows_close;

TEST(GpuLoraPool, LoadOnLoaderStreamWhileAnotherSlotRunsThenEvict) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w = testing::random_weights(testing::gpu_tiny_config(Arch::llama), 4);
  const engine::ModelConfig& c = w.config;
  const LoraWeights a = LoraWeights::random(c, 4, 8.0f, kAllLoraTargets, 1, 0.2f, 0.2f);
  const LoraWeights b = LoraWeights::random(c, 16, 32.0f, kAllLoraTargets, 2, 0.2f, 0.2f);
  const LoraWeights b2 = LoraWeights::random(c, 2, 4.0f, kAllLoraTargets, 3, 0.2f, 0.2f);
  const DeviceWeights dw(w, Precision::fp32);
  DeviceModel model(dw);
  DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 4}, Precision::fp32);
  DeviceLoraPool pool(c, {.max_slots = 3, .max_rank = 16});
  EXPECT_NE(pool.loader_stream(), model.stream());
  pool.load(0, a);
  EXPECT_TRUE(pool.occupied(0));
  EXPECT_EQ(pool.rank(0), 4);

  const std::vector<int32_t> prompt = {1, 30, 31, 32, 33};
  DeviceForwardState st0, st1;
  // Forward on slot 0 queued (no host wait), then slot 1 loaded while it may still run.
  const SeqId s0 = cache.create();
  const BatchSequence q0{s0, prompt, 0};
  model.forward({&q0, 1}, cache, &pool, st0,
                {.logits = engine::LogitsFor::all_tokens, .copy_logits = false});
  pool.load(1, b);
  EXPECT_TRUE(pool.occupied(1));
  EXPECT_EQ(pool.rank(1), 16);
  // Slot 1 used at once: the model stream waits on the slot's load event.
  const SeqId s1 = cache.create();
  const BatchSequence q1{s1, prompt, 1};
  model.forward({&q1, 1}, cache, &pool, st1, {.logits = engine::LogitsFor::all_tokens});
  const std::vector<float> got0 = st0.logits.download(model.stream());
  CpuSequence ref_a(w, &a), ref_b(w, &b);
  const int64_t n = int64_t(prompt.size());
  EXPECT_TRUE(rows_close(got0.data(), ref_a.feed(prompt).data(), n, c.vocab_size, 1e-4f,
                         "slot 0 forward"));
  EXPECT_TRUE(rows_close(st1.host_logits.data(), ref_b.feed(prompt).data(), n, c.vocab_size,
                         1e-4f, "slot 1 forward right after its load"));

  // Evict: the slot is free and forwards refuse it; a new adapter of another rank replaces it.
  pool.clear(1);
  EXPECT_FALSE(pool.occupied(1));
  EXPECT_EQ(pool.rank(1), 0);
  EXPECT_EQ(pool.first_free(), 1);
  const SeqId s2 = cache.create();
  const BatchSequence q2{s2, prompt, 1};
  try {
    model.forward({&q2, 1}, cache, &pool, st1);
    ADD_FAILURE() << "forward on an evicted slot did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("holds no adapter"));
  }
  EXPECT_EQ(cache.length(s2), 0);
  pool.load(1, b2);
  model.forward({&q2, 1}, cache, &pool, st1, {.logits = engine::LogitsFor::all_tokens});
  CpuSequence ref_b2(w, &b2);
  EXPECT_TRUE(rows_close(st1.host_logits.data(), ref_b2.feed(prompt).data(), n, c.vocab_size,
                         1e-4f, "slot 1 after evict and reload with rank 2"));
  pool.synchronize();
}

TEST(GpuLoraPool, BadSlotsAndMisfitAdaptersAreRefused) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelConfig c = testing::gpu_tiny_config(Arch::qwen3);
  DeviceLoraPool pool(c, {.max_slots = 3, .max_rank = 8, .targets = {LoraTarget::q, LoraTarget::v}});
  const LoraTarget qv[] = {LoraTarget::q, LoraTarget::v};
  const LoraWeights ok = LoraWeights::random(c, 8, 8.0f, qv, 1, 0.1f, 0.1f);
  auto expect_error = [](auto&& fn, ErrorCode code, const std::string& text) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_THAT(e.what(), ::testing::HasSubstr(text));
    }
  };
  expect_error([&] { pool.load(3, ok); }, ErrorCode::invalid_argument,
               "LoRA slot 3 out of range [0, 3)");
  expect_error([&] { pool.load(-1, ok); }, ErrorCode::invalid_argument,
               "LoRA slot -1 out of range [0, 3)");
  expect_error([&] { (void)pool.occupied(7); }, ErrorCode::invalid_argument, "out of range");
  expect_error([&] { pool.clear(99); }, ErrorCode::invalid_argument, "out of range");
  expect_error([&] { (void)pool.rank(-4); }, ErrorCode::invalid_argument, "out of range");
  expect_error([&] { pool.load(0, LoraWeights::random(c, 16, 8.0f, qv, 2, 0.1f, 0.1f)); },
               ErrorCode::invalid_argument, "exceeds the slot pool's max_rank 8");
  const LoraTarget up[] = {LoraTarget::up};
  expect_error([&] { pool.load(0, LoraWeights::random(c, 4, 8.0f, up, 3, 0.1f, 0.1f)); },
               ErrorCode::unsupported, "no storage");
  const engine::ModelConfig other = testing::gpu_tiny_config(Arch::llama);
  expect_error([&] { pool.load(0, LoraWeights::random(other, 4, 8.0f, qv, 4, 0.1f, 0.1f)); },
               ErrorCode::invalid_argument, "maybe wrong base model");
  EXPECT_FALSE(pool.occupied(0));  // nothing changed on error
  pool.load(2, ok);
  EXPECT_TRUE(pool.occupied(2));
  EXPECT_FALSE(pool.view(0, LoraTarget::up).has_value());
  ASSERT_TRUE(pool.view(1, LoraTarget::v).has_value());
  EXPECT_EQ(pool.view(1, LoraTarget::v)->d_out, c.kv_dim());
  // q and v storage for every layer, plus the [modules, slots] rank and scale tables.
  const size_t per_layer = size_t(3 * 8 * (c.dim + c.q_dim()) + 3 * 8 * (c.dim + c.kv_dim()));
  EXPECT_EQ(pool.bytes(), 4 * (per_layer * size_t(c.n_layers) + 2 * 2 * size_t(c.n_layers) * 3));
}

}  // namespace
}  // namespace spindle::engine_cuda
