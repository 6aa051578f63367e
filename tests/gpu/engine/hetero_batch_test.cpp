// Heterogeneous batches on the GPU (the twin of tests/unit/model/hetero_batch_test.cpp): base
// rows and rows of adapters of different ranks, prefill and decode rows, one slot appearing in
// two separate segments, all in one forward, equal each sequence run alone through the CPU
// engine with its adapter.

#include <gtest/gtest.h>

#include <random>

#include "gpu_fixtures.h"
#include "shared_fixtures.h"
#include "spindle/engine/loader.h"
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

// bf16: base weights, activations and KV cache in bf16 (LoRA fp32): 6e-2 of the row's largest
// |logit|; fp32: 1e-4.
void check_hetero(const engine::ModelWeights& base, Precision p, float tol) {
  const engine::ModelConfig& c = base.config;
  constexpr int kSlots = 6;
  const int64_t ranks[kSlots] = {1, 3, 8, 16, 64, 5};
  std::vector<LoraWeights> adapters;
  for (int i = 0; i < kSlots; ++i) {
    std::vector<LoraTarget> targets(kAllLoraTargets.begin(), kAllLoraTargets.end());
    if (i == 2) targets = {LoraTarget::q, LoraTarget::v, LoraTarget::down};
    const bool rslora = i % 3 == 1;
    const float alpha = rslora ? 2.0f * std::sqrt(float(ranks[i])) : 2.0f * float(ranks[i]);
    adapters.push_back(LoraWeights::random(c, ranks[i], alpha, targets, 500 + i, 0.1f, 0.1f));
    adapters.back().use_rslora = rslora;
  }
  DeviceLoraPool pool(c, {.max_slots = kSlots, .max_rank = 64});
  for (int i = 0; i < kSlots; ++i) pool.load(i, adapters[size_t(i)]);

  // Ten sequences; slot 1 appears in two separate segments, base rows in between.
  const int32_t slot_of[10] = {-1, 1, 0, 1, 2, -1, 3, 4, 5, 1};
  std::mt19937 rng(9);
  auto tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(rng() % uint32_t(c.vocab_size));
    return t;
  };
  const DeviceWeights dw(base, p);
  DeviceModel model(dw);
  DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 10}, p);
  std::vector<SeqId> seqs;
  std::vector<std::vector<int32_t>> prompt, step2;
  for (int i = 0; i < 10; ++i) {
    seqs.push_back(cache.create());
    prompt.push_back(tokens(size_t(2 + (i * 5) % 11)));
    // Step 2: sequences 0..6 decode one token, 7..9 start now (a whole prompt).
    step2.push_back(tokens(i < 7 ? 1 : size_t(3 + i)));
  }
  DeviceForwardState st;
  std::vector<BatchSequence> b1;
  for (int i = 0; i < 7; ++i) b1.push_back({seqs[size_t(i)], prompt[size_t(i)], slot_of[i]});
  model.forward(b1, cache, &pool, st, {.logits = engine::LogitsFor::all_tokens});
  const Tensor logits1 = st.host_logits.clone();
  std::vector<BatchSequence> b2;
  for (int i = 0; i < 10; ++i) b2.push_back({seqs[size_t(i)], step2[size_t(i)], slot_of[i]});
  model.forward(b2, cache, &pool, st, {.logits = engine::LogitsFor::all_tokens});

  int64_t row1 = 0, row2 = 0;
  for (int i = 0; i < 10; ++i) {
    const int s = slot_of[i];
    CpuSequence ref(base, s >= 0 ? &adapters[size_t(s)] : nullptr);
    CpuSequence plain(base, nullptr);
    const std::string who = "sequence " + std::to_string(i) + " slot " + std::to_string(s);
    if (i < 7) {
      const int64_t n = int64_t(prompt[size_t(i)].size());
      const auto want = ref.feed(prompt[size_t(i)]);
      plain.feed(prompt[size_t(i)]);
      EXPECT_TRUE(rows_close(logits1.row(row1), want.data(), n, c.vocab_size, tol,
                             who + " prefill"));
      row1 += n;
    }
    const int64_t n2 = int64_t(step2[size_t(i)].size());
    const auto want = ref.feed(step2[size_t(i)]);
    const auto base_only = plain.feed(step2[size_t(i)]);
    float worst = 0.0f;
    EXPECT_TRUE(rows_close(st.host_logits.row(row2), want.data(), n2, c.vocab_size, tol,
                           who + (i < 7 ? " decode" : " late prefill"), &worst));
    if (s >= 0 && p == Precision::fp32) {
      // The adapter must matter: its rows differ from the base by far more than the tolerance.
      EXPECT_FALSE(rows_close(want.data(), base_only.data(), n2, c.vocab_size, 100 * tol, who))
          << who << ": adapter has no visible effect";
    }
    row2 += n2;
  }
}

TEST(GpuHeteroBatch, AdaptersOfManyRanksMatchCpuOnRandomQwen3Fp32) {
  SPINDLE_REQUIRE_GPU();
  check_hetero(testing::random_weights(testing::gpu_tiny_config(Arch::qwen3), 11),
               Precision::fp32, 1e-4f);
}

TEST(GpuHeteroBatch, AdaptersOfManyRanksMatchCpuOnRandomLlamaFp32) {
  SPINDLE_REQUIRE_GPU();
  check_hetero(testing::random_weights(testing::gpu_tiny_config(Arch::llama), 12),
               Precision::fp32, 1e-4f);
}

// Routed experts: the adapters carry LoRA on every expert's gate/up/down (slot 2 on down only,
// beside a dense layer's down), so rows group by (expert, slot) inside each sparse layer.
TEST(GpuHeteroBatch, AdaptersOnExpertsMatchCpuOnRandomQwen3MoeFp32) {
  SPINDLE_REQUIRE_GPU();
  check_hetero(testing::random_weights(testing::gpu_tiny_config(Arch::qwen3_moe), 13),
               Precision::fp32, 1e-4f);
}

// Latent attention (DeepSeek-V3 shape, with YaRN and routed + shared experts): LoRA on q_a, q_b,
// kv_a, kv_b (absorbed into the query and the attended latent at decode) and o beside the
// experts'.
TEST(GpuHeteroBatch, AdaptersOnLatentAttentionMatchCpuOnRandomDeepseekV3Fp32) {
  SPINDLE_REQUIRE_GPU();
  check_hetero(testing::random_weights(testing::gpu_tiny_config(Arch::deepseek_v3), 14),
               Precision::fp32, 1e-4f);
}

TEST(GpuHeteroBatch, AdaptersOfManyRanksMatchCpuOnRandomQwen3Bf16) {
  SPINDLE_REQUIRE_GPU();
  check_hetero(testing::random_weights(testing::gpu_tiny_config(Arch::qwen3), 11),
               Precision::bf16, 6e-2f);
}

TEST(GpuHeteroBatch, AdaptersOfManyRanksMatchCpuOnStories260KFp32) {
  SPINDLE_REQUIRE_GPU();
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  check_hetero(engine::load_llama2c(bin), Precision::fp32, 1e-4f);
}

}  // namespace
}  // namespace spindle::engine_cuda
