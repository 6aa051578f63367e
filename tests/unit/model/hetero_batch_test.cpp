// Heterogeneous batches: rows of many adapters in one forward give exactly what each row gets
// alone with its adapter merged into a copy of the base weights (the merge lives only here).

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "model_fixtures.h"
#include "shared_fixtures.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/model.h"

namespace spindle::engine {
namespace {

// Every target; LoraWeights::random skips those the architecture lacks.
constexpr auto kEveryTarget = kAllLoraTargets;

// W += s·B·A for every adapted module, on a copy of the base.
ModelWeights merged_copy(const ModelWeights& base, const LoraWeights& a) {
  ModelWeights w;
  w.config = base.config;
  w.tok_emb = base.tok_emb.clone();
  w.final_norm = base.final_norm.clone();
  w.lm_head = base.config.tie_embeddings ? base.tok_emb.clone() : base.lm_head.clone();
  w.config.tie_embeddings = false;  // the merged head differs from the embedding
  auto merge = [&](Tensor& W, const LoraPair& p) {
    if (p.empty()) return;
    const int64_t n = W.dim(0), k = W.dim(1), r = a.rank;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < r; ++q) acc += double(p.B.data()[i * r + q]) * p.A.data()[q * k + j];
        W.data()[i * k + j] += float(a.scale() * acc);
      }
  };
  for (size_t l = 0; l < base.layers.size(); ++l) {
    const LayerWeights& B = base.layers[l];
    LayerWeights L{B.attn_norm.clone(), B.wq.clone(),     B.wk.clone(),   B.wv.clone(),
                   B.wo.clone(),        B.q_norm.clone(), B.k_norm.clone(), B.ffn_norm.clone(),
                   B.w_gate.clone(),    B.w_up.clone(),   B.w_down.clone()};
    L.router = B.router.clone();  // the router is not adapted
    L.router_bias = B.router_bias.clone();
    for (auto [dst, src] : {std::pair{&L.wq_a, &B.wq_a},
                            {&L.q_a_norm, &B.q_a_norm},
                            {&L.wq_b, &B.wq_b},
                            {&L.wkv_a, &B.wkv_a},
                            {&L.kv_a_norm, &B.kv_a_norm},
                            {&L.wkv_b, &B.wkv_b}}) {
      *dst = src->clone();
    }
    for (size_t e = 0; e < B.experts.size(); ++e) {
      ExpertWeights X{B.experts[e].w_gate.clone(), B.experts[e].w_up.clone(),
                      B.experts[e].w_down.clone()};
      if (a.has_experts()) {
        // Expert e's slice of the packed pair, merged as a dense module of its own.
        auto slice = [&](LoraTarget t) {
          const ExpertLoraPair& p = a.experts[l][size_t(expert_proj(t))];
          if (p.empty()) return LoraPair{};
          const int64_t r = a.rank, d_in = p.A.dim(2), d_out = p.B.dim(1);
          LoraPair one{Tensor({r, d_in}), Tensor({d_out, r})};
          std::copy_n(p.A.data() + int64_t(e) * r * d_in, r * d_in, one.A.data());
          std::copy_n(p.B.data() + int64_t(e) * d_out * r, d_out * r, one.B.data());
          return one;
        };
        merge(X.w_gate, slice(LoraTarget::gate));
        merge(X.w_up, slice(LoraTarget::up));
        merge(X.w_down, slice(LoraTarget::down));
      }
      L.experts.push_back(std::move(X));
    }
    const auto& m = a.modules[l];
    merge(L.wq, m[size_t(LoraTarget::q)]);
    merge(L.wk, m[size_t(LoraTarget::k)]);
    merge(L.wv, m[size_t(LoraTarget::v)]);
    merge(L.wo, m[size_t(LoraTarget::o)]);
    merge(L.w_gate, m[size_t(LoraTarget::gate)]);
    merge(L.w_up, m[size_t(LoraTarget::up)]);
    merge(L.w_down, m[size_t(LoraTarget::down)]);
    merge(L.wq_a, m[size_t(LoraTarget::q_a)]);
    merge(L.wq_b, m[size_t(LoraTarget::q_b)]);
    merge(L.wkv_a, m[size_t(LoraTarget::kv_a)]);
    merge(L.wkv_b, m[size_t(LoraTarget::kv_b)]);
    w.layers.push_back(std::move(L));
  }
  merge(w.lm_head, a.modules[0][size_t(LoraTarget::lm_head)]);
  return w;
}

// Runs 16 ragged rows, each with its own adapter of a different rank, in one forward and
// compares every logit with the row run alone on merged weights.
void check_hetero(const ModelWeights& base, float tolerance) {
  const ModelConfig& c = base.config;
  constexpr int kRows = 16;
  const int64_t ranks[kRows] = {1, 2, 3, 4, 8, 16, 5, 7, 32, 6, 12, 1, 24, 9, 64, 10};
  std::vector<LoraWeights> adapters;
  for (int i = 0; i < kRows; ++i) {
    // Every row gets a different adapter; a few leave some modules unadapted.
    std::vector<LoraTarget> targets(std::begin(kEveryTarget), std::end(kEveryTarget));
    if (i % 5 == 3) targets = {LoraTarget::q, LoraTarget::v, LoraTarget::kv_b, LoraTarget::down};
    // Trained-adapter magnitudes: scale 2 (alpha = 2r, or 2√r under rsLoRA), |A|, |B| <= 0.1.
    const bool rslora = i % 4 == 1;
    const float alpha = rslora ? 2.0f * std::sqrt(float(ranks[i])) : 2.0f * float(ranks[i]);
    adapters.push_back(
        LoraWeights::random(c, ranks[i], alpha, targets, /*seed=*/1000 + i, 0.1f, 0.1f));
    adapters.back().use_rslora = rslora;
  }
  LoraPoolOptions opts{.max_slots = kRows, .max_rank = 64};
  LoraSlotPool hetero_pool(c, opts);
  for (int i = 0; i < kRows; ++i) hetero_pool.load(i, adapters[size_t(i)]);

  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kRows; ++i) {
    std::vector<int32_t> p(size_t(3 + (i * 7) % 19));
    for (auto& t : p) t = int32_t(rng() % uint32_t(c.vocab_size));
    prompts.push_back(p);
  }

  const Model model(base);
  KvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = kRows});
  std::vector<BatchSequence> batch;
  for (int i = 0; i < kRows; ++i) batch.push_back({cache.create(), prompts[size_t(i)], i});
  ForwardState st;
  model.forward(batch, cache, &hetero_pool, st, {.logits = LogitsFor::all_tokens});

  // The adapters must matter: compare against the base alone.
  KvCache base_cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = kRows});
  std::vector<BatchSequence> base_batch;
  for (int i = 0; i < kRows; ++i) base_batch.push_back({base_cache.create(), prompts[size_t(i)], -1});
  ForwardState base_st;
  model.forward(base_batch, base_cache, nullptr, base_st, {.logits = LogitsFor::all_tokens});

  int64_t row = 0;
  for (int i = 0; i < kRows; ++i) {
    const ModelWeights merged = merged_copy(base, adapters[size_t(i)]);
    const Model alone(merged);
    KvCache cache1(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 1});
    ForwardState st1;
    const BatchSequence one{cache1.create(), prompts[size_t(i)], -1};
    alone.forward({&one, 1}, cache1, nullptr, st1, {.logits = LogitsFor::all_tokens});
    float worst = 0, effect = 0;
    for (int64_t t = 0; t < int64_t(prompts[size_t(i)].size()); ++t) {
      for (int64_t v = 0; v < c.vocab_size; ++v) {
        worst = std::max(worst, std::abs(st.logits.row(row + t)[v] - st1.logits.row(t)[v]));
        effect = std::max(effect, std::abs(st.logits.row(row + t)[v] - base_st.logits.row(row + t)[v]));
      }
    }
    EXPECT_LE(worst, tolerance) << "row " << i << " rank " << ranks[i];
    EXPECT_GT(effect, 100 * tolerance) << "row " << i << ": adapter has no visible effect";
    row += int64_t(prompts[size_t(i)].size());
  }
}

TEST(HeteroBatch, SixteenAdaptersMatchMergedWeightsOnRandomQwen3) {
  check_hetero(testing::random_weights(testing::tiny_config(Arch::qwen3), 11), 1e-4f);
}

// Qwen3-MoE: 16 adapters, each adapting the routed experts too, in one batch: a sparse layer's
// rows regroup by (expert, slot), one SGMV segment per slot inside each expert's GEMM rows.
TEST(HeteroBatch, SixteenAdaptersMatchMergedWeightsOnRandomQwen3Moe) {
  check_hetero(testing::random_weights(testing::tiny_config(Arch::qwen3_moe), 13), 1e-4f);
}

// DeepSeek-V3: the MLA targets (q_a, q_b, kv_a, and kv_b absorbed into the latent attention),
// the shared experts and the routed experts, 16 adapters in one batch.
TEST(HeteroBatch, SixteenAdaptersMatchMergedWeightsOnRandomDeepseekV3) {
  check_hetero(testing::random_weights(testing::tiny_config(Arch::deepseek_v3), 14), 1e-4f);
}

TEST(HeteroBatch, SixteenAdaptersMatchMergedWeightsOnRandomLlama) {
  check_hetero(testing::random_weights(testing::tiny_config(Arch::llama), 12), 1e-4f);
}

TEST(HeteroBatch, SixteenAdaptersMatchMergedWeightsOnStories260K) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  check_hetero(load_llama2c(bin), 1e-4f);
}

TEST(HeteroBatch, AdapterChangesOutputAndBaseRowsStayBase) {
  const ModelWeights base = testing::random_weights(testing::tiny_config(Arch::llama), 3);
  const ModelConfig& c = base.config;
  LoraSlotPool pool(c, {.max_slots = 2, .max_rank = 8});
  pool.load(1, LoraWeights::random(c, 8, 16.0f, kEveryTarget, 5, 0.3f, 0.3f));
  const Model model(base);
  KvCache cache(c, {.block_size = 8, .n_blocks = 0, .max_seqs = 3});
  const std::vector<int32_t> p = {1, 5, 9, 13};
  std::vector<BatchSequence> batch = {
      {cache.create(), p, -1}, {cache.create(), p, 1}, {cache.create(), p, -1}};
  ForwardState st;
  model.forward(batch, cache, &pool, st);
  float diff_adapter = 0, diff_base = 0;
  for (int64_t v = 0; v < c.vocab_size; ++v) {
    diff_adapter = std::max(diff_adapter, std::abs(st.logits.row(0)[v] - st.logits.row(1)[v]));
    diff_base = std::max(diff_base, std::abs(st.logits.row(0)[v] - st.logits.row(2)[v]));
  }
  EXPECT_GT(diff_adapter, 1e-2f);
  EXPECT_EQ(diff_base, 0.0f);
}

// Slots reloaded with smaller ranks (and one cleared in between) hold exactly the new adapter:
// A rows [0, r) are its lora_A and the slot's first d_out·r floats of B its lora_B (packed at
// rank r, kernels/lora.h), whatever the previous, larger adapter left past them; and a forward
// through such a slot equals a fresh pool holding that adapter alone. Qwen3-MoE, so routed
// experts are covered.
TEST(HeteroBatch, ReloadedSlotHoldsTheNewAdapterPackedAtItsRank) {
  const ModelWeights base = testing::random_weights(testing::tiny_config(Arch::qwen3_moe), 21);
  const ModelConfig& c = base.config;
  const LoraPoolOptions opts{.max_slots = 2, .max_rank = 8};
  LoraSlotPool pool(c, opts);
  const LoraWeights big = LoraWeights::random(c, 8, 16.0f, kEveryTarget, 31, 0.3f, 0.3f);
  const LoraWeights small = LoraWeights::random(c, 2, 4.0f, kEveryTarget, 32, 0.3f, 0.3f);
  const LoraWeights mid = LoraWeights::random(c, 5, 10.0f, kEveryTarget, 33, 0.3f, 0.3f);
  pool.load(0, big);
  pool.load(1, big);
  pool.load(0, small);  // 8 -> 2: what `big` left past rank 2 stays, unread
  pool.load(1, mid);    // 8 -> 5
  pool.clear(1);        // a cleared slot reads as rank 0 ...
  ASSERT_EQ(pool.view(0, LoraTarget::q)->rank[1], 0);
  EXPECT_FALSE(pool.occupied(1));
  pool.load(1, small);  // ... and holds the next adapter at that adapter's rank

  // Every (layer, target) view, dense and per expert: both slots = `small`.
  int64_t checked = 0;
  auto check = [&](const kernels::LoraSlots& v, const float* A, const float* B,
                   const std::string& where) {
    const int64_t R = v.max_rank, r = small.rank;
    for (int64_t s = 0; s < 2; ++s) {
      ASSERT_EQ(v.rank[s], r) << where;
      const float* slot_a = v.A + s * R * v.d_in;
      const float* slot_b = kernels::slot_b(v.B, v, s);
      for (int64_t i = 0; i < r * v.d_in; ++i) {
        ASSERT_EQ(slot_a[i], A != nullptr ? A[i] : 0.0f) << where << " slot " << s << " A " << i;
      }
      for (int64_t i = 0; i < v.d_out * r; ++i) {
        ASSERT_EQ(slot_b[i], B != nullptr ? B[i] : 0.0f) << where << " slot " << s << " B " << i;
      }
    }
    ++checked;
  };
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      if (!lora_target_per_layer(t) && l > 0) continue;  // the unembedding lives at layer 0
      if (auto v = pool.view(l, t)) {
        const LoraPair& p = small.modules[size_t(l)][size_t(t)];
        check(*v, p.A.data(), p.B.data(), "layer " + std::to_string(l) + " " + lora_target_name(t));
      }
      if (expert_proj(t) < 0) continue;
      for (int64_t e = 0; e < c.moe.n_experts; ++e) {
        const auto v = pool.expert_view(l, t, e);
        if (!v) break;
        const ExpertLoraPair& p = small.experts[size_t(l)][size_t(expert_proj(t))];
        const int64_t r = small.rank;
        check(*v, p.A.data() + e * r * v->d_in, p.B.data() + e * v->d_out * r,
              "layer " + std::to_string(l) + " expert " + std::to_string(e) + " " +
                  lora_target_name(t));
      }
    }
  }
  EXPECT_GT(checked, 0);

  // The forward through the reloaded slot equals a fresh pool with `small` alone.
  LoraSlotPool fresh(c, opts);
  fresh.load(0, small);
  const Model model(base);
  const std::vector<int32_t> p = {3, 1, 4, 1, 5, 9, 2, 6};
  auto logits = [&](const LoraSlotPool& with) {
    KvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 1});
    ForwardState st;
    const BatchSequence one{cache.create(), p, 0};
    model.forward({&one, 1}, cache, &with, st, {.logits = LogitsFor::all_tokens});
    const float* first = st.logits.row(0);
    return std::vector<float>(first, first + int64_t(p.size()) * c.vocab_size);
  };
  EXPECT_EQ(logits(pool), logits(fresh));
}

}  // namespace
}  // namespace spindle::engine
