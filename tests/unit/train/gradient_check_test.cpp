// Finite-difference checks of the analytic gradients: for every LoRA parameter kind (A and B
// of q, k, v, o, gate, up, down, lm_head; MLA's q_a, q_b, kv_a, kv_b; routed and shared
// experts), for every loss, on tiny random Llama, Qwen3, Qwen3-MoE and DeepSeek-V3 models; and for
// base weights in full-parameter mode. Directional central differences along a random direction per
// tensor, with the loss accumulated in double.

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "../model/model_fixtures.h"
#include "central_difference.h"
#include "spindle/engine/trainer.h"

namespace spindle::engine {
namespace {

using spindle::testing::central_difference;
using spindle::testing::routing;

// Every target; LoraWeights::random skips those the architecture lacks (k/v on MLA, ...).
constexpr auto kAll = kAllLoraTargets;

// Two data of different lengths; RL inputs place ρ well inside or well outside the clip range
// (never near a kink, where a finite difference is meaningless).
std::vector<TrainDatum> make_batch(const Model& model, LoraSlotPool& pool, int32_t slot,
                                   const LoraWeights* adapter, LossFn fn, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  const int64_t V = model.config().vocab_size;
  std::vector<TrainDatum> batch(2);
  const size_t lens[2] = {7, 4};
  for (size_t i = 0; i < 2; ++i) {
    TrainDatum& d = batch[i];
    d.slot = slot;
    for (size_t t = 0; t < lens[i]; ++t) {
      d.input_tokens.push_back(int32_t(rng() % V));
      d.target_tokens.push_back(int32_t(rng() % V));
      d.weights.push_back(t == 0 ? 0.0f : 0.5f + float(t % 3));  // first token masked
      d.advantages.push_back(float(int(rng() % 5) - 2) * 0.7f);
    }
  }
  if (fn != LossFn::cross_entropy) {
    LoraTrainer probe(model, pool);
    probe.attach(slot, adapter->clone());
    const auto out = probe.forward(batch, LossFn::cross_entropy);
    const float offsets[4] = {-0.3f, -0.05f, 0.05f, 0.4f};
    for (size_t i = 0; i < 2; ++i)
      for (size_t t = 0; t < lens[i]; ++t)
        batch[i].logprobs.push_back(out.logprobs[i][t] + offsets[(i + t) % 4]);
  }
  return batch;
}

void check_lora_gradients(Arch arch, LossFn fn, bool router_aux = false) {
  ModelConfig config = testing::tiny_config(arch);
  if (router_aux) {
    config.moe.router_aux_loss = true;
    config.moe.aux_loss_coef = 0.5f;  // large, so that its gradient is a visible share
  }
  const ModelWeights w = testing::random_weights(config, 40 + int(arch));
  const ModelConfig& c = w.config;
  const Model model(w);
  LoraSlotPool pool(c, {.max_slots = 2, .max_rank = 4});
  // Non-zero B so that A has a gradient; rsLoRA to exercise its scale.
  LoraWeights adapter = LoraWeights::random(c, 3, 5.0f, kAll, 8, 0.3f, 0.3f);
  adapter.use_rslora = true;
  pool.load(1, adapter);
  LossConfig cfg;
  cfg.beta = 0.7f;
  const auto batch = make_batch(model, pool, 1, &adapter, fn, 17);

  LoraTrainer trainer(model, pool);
  trainer.attach(1, adapter.clone());
  const auto base_out = trainer.forward_backward(batch, fn, cfg);
  const LoraWeights& g = trainer.grads(1);

  // cispo's stop-gradient has no finite-difference counterpart in its own loss value: check
  // it against the loss it differentiates, −Σ w·c·log p·A with c = clip(ρ) frozen at the
  // current point, which is dro with β = 0 and weights w·c.
  LossFn fd_fn = fn;
  LossConfig fd_cfg = cfg;
  std::vector<TrainDatum> fd_batch = batch;
  if (fn == LossFn::cispo) {
    fd_fn = LossFn::dro;
    fd_cfg.beta = 0.0f;
    for (size_t i = 0; i < fd_batch.size(); ++i)
      for (size_t t = 0; t < fd_batch[i].weights.size(); ++t) {
        const double rho = std::exp(double(base_out.logprobs[i][t]) - fd_batch[i].logprobs[t]);
        fd_batch[i].weights[t] *= float(std::clamp(rho, double(cfg.clip_low_threshold),
                                                   double(cfg.clip_high_threshold)));
      }
  }

  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  int checked = 0, flipped = 0;
  // Every adapted tensor by name: the dense modules, then (Qwen3-MoE) every routed expert's
  // packed A and B of gate, up and down.
  std::vector<std::pair<std::string, const Tensor*>> grads;
  for_each_lora_tensor(g, [&](const std::string& name, const Tensor& t) {
    grads.push_back({name, &t});
  });
  for (const auto& [name, gt] : grads) {
    Tensor dir(gt->shape());
    for (float& x : dir.span()) x = nd(rng);
    double analytic = 0;
    for (int64_t i = 0; i < gt->numel(); ++i) analytic += double(gt->data()[i]) * dir.data()[i];
    auto perturbed = [&, &name = name](float eps) {
      LoraWeights p = adapter.clone();
      for_each_lora_tensor(p, [&](const std::string& n, Tensor& x) {
        if (n != name) return;
        for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] += eps * dir.data()[i];
      });
      return p;
    };
    auto loss_at = [&](float eps) {
      LoraTrainer probe(model, pool);
      probe.attach(1, perturbed(eps));
      return probe.forward(fd_batch, fd_fn, fd_cfg).metrics.loss;
    };
    auto routes = [&](float eps) {
      pool.load(1, perturbed(eps));
      return routing(model, &pool, fd_batch, /*use_slots=*/true);
    };
    // A step that moves the loss by about 1e-2: small enough to stay on one side of every clip
    // kink and in the linear regime of ρ = e^(log p − q), large against fp32 rounding of the
    // loss.
    const float eps = float(std::min(1e-3, 3e-3 / std::max(1.0, std::abs(analytic))));
    const auto fd = central_difference(loss_at, routes, eps);
    ++checked;
    if (!fd) {
      ++flipped;
      continue;
    }
    const double numeric = fd->value;
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::abs(numeric) + fd->rounding)
        << arch_name(arch) << " " << loss_fn_name(fn) << " " << name;
  }
  if (c.moe.n_experts > 0) {
    EXPECT_TRUE(g.has_experts()) << "the adapter adapts the routed experts";
  }
  // Directions whose every step flipped a routing choice are not checked; they must be rare.
  EXPECT_LE(flipped * 8, checked) << flipped << " of " << checked << " directions unchecked";
}

class LoraGradients : public ::testing::TestWithParam<std::tuple<Arch, LossFn>> {};

TEST_P(LoraGradients, MatchFiniteDifferences) {
  check_lora_gradients(std::get<0>(GetParam()), std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    ArchsAndLosses, LoraGradients,
    ::testing::Combine(::testing::Values(Arch::llama, Arch::qwen3, Arch::qwen3_moe,
                                         Arch::deepseek_v3),
                       ::testing::Values(LossFn::cross_entropy, LossFn::importance_sampling,
                                         LossFn::ppo, LossFn::cispo, LossFn::dro)),
    [](const auto& info) {
      return std::string(arch_name(std::get<0>(info.param))) + "_" +
             loss_fn_name(std::get<1>(info.param));
    });

// output_router_logits: the router's load-balancing loss is part of the objective (its value
// in metrics.loss, its gradient through the router's softmax into every LoRA upstream).
TEST(RouterAuxLoss, LoraGradientsMatchFiniteDifferences) {
  check_lora_gradients(Arch::qwen3_moe, LossFn::cross_entropy, /*router_aux=*/true);
}

// The value, recomputed here from the forward's routing: per policy, over its tokens and every
// sparse layer, coef · E · Σ_e (count_e / N) · (Σ p_e / N) (HF load_balancing_loss_func).
TEST(RouterAuxLoss, ValueIsHfLoadBalancingLossPerPolicy) {
  ModelConfig c = testing::tiny_config(Arch::qwen3_moe);
  const ModelWeights w = testing::random_weights(c, 5);
  const Model model(w);
  LoraSlotPool pool(c, {.max_slots = 2, .max_rank = 4});
  const auto a0 = LoraWeights::random(c, 2, 4.0f, kAll, 1, 0.3f, 0.3f);
  const auto a1 = LoraWeights::random(c, 4, 4.0f, kAll, 2, 0.3f, 0.3f);
  std::vector<TrainDatum> batch = make_batch(model, pool, 0, &a0, LossFn::cross_entropy, 3);
  for (TrainDatum d : make_batch(model, pool, 1, &a1, LossFn::cross_entropy, 4)) {
    batch.push_back(std::move(d));
  }
  auto loss_with = [&](bool aux) {
    ModelWeights w2 = testing::random_weights(c, 5);
    w2.config.moe.router_aux_loss = aux;
    w2.config.moe.aux_loss_coef = 0.25f;
    const Model m2(w2);
    LoraSlotPool p2(w2.config, {.max_slots = 2, .max_rank = 4});
    LoraTrainer t(m2, p2);
    t.attach(0, a0.clone());
    t.attach(1, a1.clone());
    return t.forward(batch, LossFn::cross_entropy).metrics.loss;
  };
  // Independent recomputation from a keep_activations forward of the same rows.
  pool.load(0, a0);
  pool.load(1, a1);
  KvCache cache(c, {.block_size = 16, .n_blocks = 0, .max_seqs = int64_t(batch.size())});
  std::vector<BatchSequence> seqs;
  for (const auto& d : batch) seqs.push_back({cache.create(), d.input_tokens, d.slot});
  ForwardState st;
  model.forward(seqs, cache, &pool, st,
                {.logits = LogitsFor::hidden_only, .keep_activations = true});
  const int64_t E = c.moe.n_experts, K = c.moe.top_k;
  double want = 0;
  for (int32_t slot : {0, 1}) {
    std::vector<double> count(size_t(E), 0.0), prob(size_t(E), 0.0);
    double n = 0;
    int64_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t len = int64_t(batch[i].input_tokens.size());
      if (batch[i].slot == slot) {
        for (int64_t l = 0; l < c.n_layers; ++l) {
          if (!c.sparse_layer(l)) continue;
          const auto& m = st.layers[size_t(l)].moe;
          for (int64_t t = row; t < row + len; ++t) {
            n += 1;
            for (int64_t k = 0; k < K; ++k) count[size_t(m.expert[size_t(t * K + k)])] += 1;
            for (int64_t e = 0; e < E; ++e) prob[size_t(e)] += m.probs.row(t)[e];
          }
        }
      }
      row += len;
    }
    double aux = 0;
    for (int64_t e = 0; e < E; ++e) aux += (count[size_t(e)] / n) * (prob[size_t(e)] / n);
    want += 0.25 * double(E) * aux;
  }
  EXPECT_NEAR(loss_with(true) - loss_with(false), want, 1e-5 * std::max(1.0, want));
  EXPECT_GT(want, 0.1);  // about coef · top_k per policy: not a negligible term
}

TEST(FullParameterGradients, MatchFiniteDifferences) {
  // Qwen3-MoE: the router (through the top-k weights and their renormalisation) and every
  // expert too; the top-k choice itself is a constant. DeepSeek-V3: every MLA projection and
  // norm, the sigmoid router's gates, the shared experts; the correction bias only steers the
  // choice (its gradient is 0, and a step that flips a choice is not compared).
  for (Arch arch : {Arch::llama, Arch::qwen3, Arch::qwen3_moe, Arch::deepseek_v3}) {
    ModelWeights w = testing::random_weights(testing::tiny_config(arch), 60 + int(arch));
    const Model model(w);
    LoraSlotPool pool(w.config, {.max_slots = 1, .max_rank = 1});
    auto batch = make_batch(model, pool, -1, nullptr, LossFn::cross_entropy, 23);
    FullTrainer trainer(model, w);
    trainer.forward_backward(batch, LossFn::cross_entropy);
    // Directional derivative of every base tensor against the change in loss along `dir`.
    std::vector<std::pair<std::string, Tensor*>> params;
    for_each_hf_tensor(w, [&](const std::string& n, Tensor& t) { params.push_back({n, &t}); });
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    int checked = 0, flipped = 0;
    for (auto& [name, tensor] : params) {
      Tensor dir(tensor->shape());
      for (float& x : dir.span()) x = nd(rng);
      const Tensor* grad = nullptr;
      for_each_hf_tensor(trainer.grads(), [&](const std::string& n, const Tensor& t) {
        if (n == name) grad = &t;
      });
      ASSERT_NE(grad, nullptr) << name;
      double analytic = 0;
      for (int64_t i = 0; i < grad->numel(); ++i) analytic += double(grad->data()[i]) * dir.data()[i];
      auto loss_at = [&](float eps) {
        for (int64_t i = 0; i < tensor->numel(); ++i) tensor->data()[i] += eps * dir.data()[i];
        FullTrainer probe(model, w);
        const double loss = probe.forward_backward(batch, LossFn::cross_entropy).metrics.loss;
        for (int64_t i = 0; i < tensor->numel(); ++i) tensor->data()[i] -= eps * dir.data()[i];
        return loss;
      };
      auto routes = [&](float eps) {
        for (int64_t i = 0; i < tensor->numel(); ++i) tensor->data()[i] += eps * dir.data()[i];
        auto r = routing(model, nullptr, batch, /*use_slots=*/false);
        for (int64_t i = 0; i < tensor->numel(); ++i) tensor->data()[i] -= eps * dir.data()[i];
        return r;
      };
      const auto fd = central_difference(loss_at, routes, 2e-3f);
      ++checked;
      if (!fd) {
        ++flipped;
        continue;
      }
      const double numeric = fd->value;
      EXPECT_NEAR(analytic, numeric, 3e-3 + 2e-2 * std::abs(numeric) + fd->rounding)
          << arch_name(arch) << " " << name;
    }
    EXPECT_LE(flipped * 8, checked) << arch_name(arch) << ": " << flipped << " of " << checked
                                    << " directions unchecked (routing flips)";
  }
}

}  // namespace
}  // namespace spindle::engine
