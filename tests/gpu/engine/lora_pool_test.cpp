// The device slot pool: loads go through the pool's own stream while a forward on another slot
// is queued on the model's stream, and a forward that uses a just-loaded slot sees the adapter
// (it waits on the slot's event, not on the host); evict frees the slot; bad slots and adapters
// that do not fit are refused with the CPU pool's messages.

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "gpu_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/engine_cuda/device_model.h"
#include "spindle/engine_cuda/trainer.h"

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

// Slot `slot` of a pool view holds exactly A [r, d_in] in rows [0, r) of its [max_rank, d_in]
// block and B [d_out, r] in columns [0, r) of its [d_out, max_rank] block, zero past r (and,
// with slot0_empty, slot 0's first entries are zero: never loaded).
void expect_slot_holds(const kernels::cuda::DeviceLoraSlots& v, int64_t slot, const float* A_want,
                       const float* B_want, int64_t r, bool slot0_empty, const std::string& what) {
  const int64_t S = v.max_slots, R = v.max_rank;
  std::vector<float> A(size_t(S * R * v.d_in)), B(size_t(S * v.d_out * R));
  kernels::cuda::check(cudaMemcpy(A.data(), v.A, A.size() * 4, cudaMemcpyDeviceToHost), "A");
  kernels::cuda::check(cudaMemcpy(B.data(), v.B, B.size() * 4, cudaMemcpyDeviceToHost), "B");
  const float* a_slot = A.data() + slot * R * v.d_in;
  const float* b_slot = B.data() + slot * v.d_out * R;
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < v.d_in; ++j)
      ASSERT_EQ(a_slot[i * v.d_in + j], i < r ? A_want[i * v.d_in + j] : 0.0f)
          << what << " A row " << i;
  for (int64_t j = 0; j < v.d_out; ++j)
    for (int64_t i = 0; i < R; ++i)
      ASSERT_EQ(b_slot[j * R + i], i < r ? B_want[j * r + i] : 0.0f) << what << " B col " << i;
  if (slot0_empty) {
    EXPECT_EQ(A[0], 0.0f) << what;
    EXPECT_EQ(B[0], 0.0f) << what;
  }
}

// Routed experts (and the dense layer's modules, uploaded by dirty rank): expert e's view of
// slot s holds exactly expert e's A [r, d_in] in rows [0, r)
// of its [max_rank, d_in] block and B [d_out, r] in columns [0, r) of its [d_out, max_rank]
// block (zero past r), after a higher-rank adapter occupied the slot first; other slots stay
// untouched. A pool without expert storage refuses an adapter on experts by name, and the CUDA
// trainer refuses the router's aux loss (output_router_logits), naming --device cpu.
TEST(GpuLoraPool, ExpertLoraLandsInEachExpertsBlockAndAuxLossTrainingIsRefused) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w =
      testing::random_weights(testing::gpu_tiny_config(Arch::qwen3_moe), 6);
  const engine::ModelConfig& c = w.config;
  const int64_t E = c.moe.n_experts, R = 8, S = 3;
  const LoraTarget experts[] = {LoraTarget::gate, LoraTarget::up, LoraTarget::down};
  const LoraWeights big = LoraWeights::random(c, 8, 8.0f, experts, 7, 0.2f, 0.2f);
  const LoraWeights a = LoraWeights::random(c, 3, 6.0f, experts, 8, 0.2f, 0.2f);
  ASSERT_TRUE(a.has_experts());
  DeviceLoraPool pool(c, {.max_slots = int32_t(S), .max_rank = int32_t(R)});
  pool.load(1, big);
  pool.load(1, a);
  pool.load(2, big);
  pool.synchronize();
  for (const int64_t l : {int64_t{0}, int64_t{2}}) {  // the sparse layers
    for (const LoraTarget t : experts) {
      const auto& p = a.experts[size_t(l)][size_t(engine::expert_proj(t))];
      const auto [d_in, d_out] = engine::lora_expert_dims(c, t);
      for (int64_t e = 0; e < E; ++e) {
        const auto v = pool.expert_view(l, t, e);
        ASSERT_TRUE(v.has_value());
        expect_slot_holds(*v, 1, p.A.data() + e * 3 * d_in, p.B.data() + e * d_out * 3, 3,
                          /*slot0_empty=*/true,
                          "layer " + std::to_string(l) + " expert " + std::to_string(e));
      }
    }
  }
  EXPECT_FALSE(pool.expert_view(1, LoraTarget::gate, 0).has_value());  // layer 1 is dense
  // Layer 1's dense MLP modules take the same adapter's gate/up/down through the dirty-rank
  // upload: rows [0, 3) of A and columns [0, 3) of B hold `a`, the rest of the slot (where
  // `big` had rank 8) is zero again.
  for (const LoraTarget t : experts) {
    const auto v = pool.view(1, t);
    ASSERT_TRUE(v.has_value());
    const auto& p = a.modules[1][size_t(t)];
    ASSERT_FALSE(p.empty());
    expect_slot_holds(*v, 1, p.A.data(), p.B.data(), 3, /*slot0_empty=*/false,
                      std::string("dense ") + lora_target_name(t));
  }
  EXPECT_FALSE(pool.expert_view(0, LoraTarget::q, 0).has_value());

  DeviceLoraPool attn_only(c, {.max_slots = 1, .max_rank = 8, .targets = {LoraTarget::q}});
  try {
    attn_only.load(0, a);
    ADD_FAILURE() << "an adapter on experts loaded into a pool without expert storage";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("mlp.experts.gate_proj"));
  }

  // The router's aux loss is not trained on the GPU yet: refused by name, nothing attached.
  engine::ModelWeights aux = testing::random_weights(testing::gpu_tiny_config(Arch::qwen3_moe), 6);
  aux.config.moe.router_aux_loss = true;
  const DeviceWeights dw(aux, Precision::fp32);
  DeviceModel model(dw);
  DeviceTrainer trainer(model, pool);
  try {
    trainer.attach(0, a);
    ADD_FAILURE() << "training with the router's aux loss was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--device cpu"));
  }
  EXPECT_FALSE(trainer.attached(0));
}

}  // namespace
}  // namespace spindle::engine_cuda
