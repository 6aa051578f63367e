// LoRA gradients on the GPU (fp32 mode), tiny random Llama, Qwen3, Qwen3-MoE and DeepSeek-V3
// (latent attention: q_a, q_b, kv_a, kv_b targets) models, every loss:
//  - against central finite differences of the GPU's own forward loss, along a random
//    direction per tensor (the CPU gradient test's method and tolerances,
//    tests/unit/train/gradient_check_test.cpp);
//  - against the CPU engine's gradients for the same batch, element-wise, with two adapters of
//    different ranks interleaved in one batch and the unembedding scored in small row chunks.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../../unit/train/central_difference.h"
#include "train_fixtures.h"

namespace spindle::engine_cuda {
namespace {

using namespace spindle::engine_cuda::testing;
using engine::LossConfig;

std::string case_name(Arch arch, LossFn fn) {
  return std::string(arch_name(arch)) + " " + loss_fn_name(fn);
}

class GpuLoraGradients : public ::testing::TestWithParam<std::tuple<Arch, LossFn>> {};

TEST_P(GpuLoraGradients, MatchFiniteDifferencesOfTheGpuLoss) {
  SPINDLE_REQUIRE_GPU();
  const auto [arch, fn] = GetParam();
  Rig rig(arch, 40 + int(arch), Precision::fp32, {.max_slots = 2, .max_rank = 4});
  const engine::ModelConfig& c = rig.config();
  // Non-zero B so that A has a gradient; rsLoRA to exercise its scale.
  LoraWeights adapter = LoraWeights::random(c, 3, 5.0f, kAllTargets, 8, 0.3f, 0.3f);
  adapter.use_rslora = true;
  LossConfig cfg;
  cfg.beta = 0.7f;
  auto batch = make_batch(c, {7, 4}, {1, 1}, 17);
  if (fn != LossFn::cross_entropy) {
    rig.cpu_trainer->attach(1, adapter.clone());
    add_sampler_logprobs(*rig.cpu_trainer, batch);
  }

  DeviceTrainer& trainer = *rig.dev_trainer;
  trainer.attach(1, adapter);
  const auto base_out = trainer.forward_backward(batch, fn, cfg);
  const LoraWeights g = trainer.grads(1);

  // cispo's stop-gradient: check against the loss it differentiates (dro with β = 0 and
  // weights w·clip(ρ) frozen at the current point), as the CPU test does.
  LossFn fd_fn = fn;
  LossConfig fd_cfg = cfg;
  std::vector<TrainDatum> fd_batch = batch;
  if (fn == LossFn::cispo) {
    fd_fn = LossFn::dro;
    fd_cfg.beta = 0.0f;
    for (size_t i = 0; i < fd_batch.size(); ++i)
      for (size_t t = 0; t < fd_batch[i].weights.size(); ++t) {
        const double rho = std::exp(double(base_out.logprobs[i][t]) - fd_batch[i].logprobs[t]);
        fd_batch[i].weights[t] *=
            float(std::clamp(rho, double(cfg.clip_low_threshold), double(cfg.clip_high_threshold)));
      }
  }

  // Every adapted tensor (dense modules, then routed experts' packed tensors) along a random
  // direction.
  std::vector<std::string> names;
  engine::for_each_lora_tensor(g, [&](const std::string& n, const Tensor&) { names.push_back(n); });
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  int checked = 0, flipped = 0;
  for (const std::string& name : names) {
    const Tensor& gt = lora_tensor(g, name);
    Tensor dir(gt.shape());
    for (float& x : dir.span()) x = nd(rng);
    double analytic = 0;
    for (int64_t i = 0; i < gt.numel(); ++i) analytic += double(gt.data()[i]) * dir.data()[i];
    auto perturbed = [&](float eps) {
      LoraWeights p = adapter.clone();
      Tensor& x = lora_tensor(p, name);
      for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] += eps * dir.data()[i];
      return p;
    };
    auto loss_at = [&](float eps) {
      trainer.attach(1, perturbed(eps));
      return trainer.forward(fd_batch, fd_fn, fd_cfg).metrics.loss;
    };
    // Routed experts make the loss piecewise smooth: the step shrinks until no token's top-k
    // choice flips within it (the CPU test's rule). The routing is the CPU engine's (fp32, the
    // same choice as the GPU's but at ~1e-6 ties).
    auto routes = [&](float eps) {
      rig.cpu_pool->load(1, perturbed(eps));
      return spindle::testing::routing(*rig.cpu_model, rig.cpu_pool.get(), fd_batch,
                                       /*use_slots=*/true);
    };
    // A step that moves the loss by about 1e-2 (see the CPU test).
    const float eps = float(std::min(1e-3, 3e-3 / std::max(1.0, std::abs(analytic))));
    const auto fd = spindle::testing::central_difference(loss_at, routes, eps);
    ++checked;
    if (!fd) {
      ++flipped;
      continue;
    }
    EXPECT_NEAR(analytic, fd->value, 2e-3 + 2e-2 * std::abs(fd->value) + fd->rounding)
        << case_name(arch, fn) << " " << name;
  }
  EXPECT_FALSE(names.empty());
  // Directions whose every step flipped a routing choice are not checked; they must be rare.
  EXPECT_LE(flipped * 8, checked) << flipped << " of " << checked << " directions unchecked";
}

// The GPU trainer's loss, logprobs and gradients against the CPU engine's for one batch of
// sequences (lengths, slots) over two adapters of different ranks (slots 0 and 2), then a second
// call that accumulates.
void expect_cpu_gradients(const engine::ModelConfig& config, const std::string& label, LossFn fn,
                          uint64_t seed, const std::vector<size_t>& lengths,
                          const std::vector<int32_t>& slots, int64_t unembed_chunk_rows) {
  Rig rig(config, seed, Precision::fp32, {.max_slots = 3, .max_rank = 4},
          {.unembed_chunk_rows = unembed_chunk_rows});
  const engine::ModelConfig& c = rig.config();
  LoraWeights a0 = LoraWeights::random(c, 4, 8.0f, kAllTargets, 3, 0.3f, 0.3f);
  const LoraTarget some[] = {LoraTarget::q, LoraTarget::v, LoraTarget::up, LoraTarget::down,
                             LoraTarget::lm_head};
  LoraWeights a2 = LoraWeights::random(c, 2, 4.0f, some, 4, 0.3f, 0.3f);
  LossConfig cfg;
  cfg.beta = 0.3f;
  auto batch = make_batch(c, lengths, slots, 29);
  rig.cpu_trainer->attach(0, a0.clone());
  rig.cpu_trainer->attach(2, a2.clone());
  if (fn != LossFn::cross_entropy) add_sampler_logprobs(*rig.cpu_trainer, batch);
  rig.dev_trainer->attach(0, a0);
  rig.dev_trainer->attach(2, a2);

  const auto want = rig.cpu_trainer->forward_backward(batch, fn, cfg);
  const auto got = rig.dev_trainer->forward_backward(batch, fn, cfg);
  EXPECT_EQ(got.metrics.n_tokens, want.metrics.n_tokens);
  EXPECT_EQ(got.metrics.n_clipped, want.metrics.n_clipped);
  EXPECT_NEAR(got.metrics.loss, want.metrics.loss, 1e-4 * (1.0 + std::abs(want.metrics.loss)))
      << (label + " " + loss_fn_name(fn));
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < want.logprobs.size(); ++i) {
    ASSERT_EQ(got.logprobs[i].size(), want.logprobs[i].size()) << "datum " << i;
    for (size_t t = 0; t < want.logprobs[i].size(); ++t)
      EXPECT_NEAR(got.logprobs[i][t], want.logprobs[i][t], 2e-5)
          << (label + " " + loss_fn_name(fn)) << " datum " << i << " position " << t;
  }
  for (int32_t slot : {0, 2}) {
    expect_lora_close(
        rig.dev_trainer->grads(slot), rig.cpu_trainer->grads(slot),
        /*rtol=*/2e-4, /*atol=*/1e-6,
        (label + " " + loss_fn_name(fn)) + " gradients of slot " + std::to_string(slot));
  }
  // A second call accumulates (Tinker semantics): the sums double.
  rig.cpu_trainer->forward_backward(batch, fn, cfg);
  rig.dev_trainer->forward_backward(batch, fn, cfg);
  expect_lora_close(rig.dev_trainer->grads(0), rig.cpu_trainer->grads(0), 2e-4, 1e-6,
                    (label + " " + loss_fn_name(fn)) + " accumulated gradients of slot 0");
}

// Short interleaved sequences: the LoRA backward runs the hand-written kernels. Chunks of 5
// logits rows: chunk edges fall inside sequences and inside LoRA segments.
TEST_P(GpuLoraGradients, MatchTheCpuEngineOnAHeterogeneousBatch) {
  SPINDLE_REQUIRE_GPU();
  const auto [arch, fn] = GetParam();
  expect_cpu_gradients(gpu_tiny_config(arch), arch_name(arch), fn, 50 + int(arch), {6, 9, 1, 5},
                       {2, 0, 2, 0}, 5);
}

// Every sequence at least kLoraGemmMinRows long and the unembedding in one chunk: the dense
// modules' (and lm_head's) LoRA backward runs as cuBLAS GEMMs (cuda/lora.h); routed experts'
// calls take either path by their rows.
TEST_P(GpuLoraGradients, MatchTheCpuEngineOnTallSequences) {
  SPINDLE_REQUIRE_GPU();
  const auto [arch, fn] = GetParam();
  expect_cpu_gradients(gpu_tiny_config(arch), arch_name(arch), fn, 60 + int(arch), {40, 24, 33},
                       {0, 2, 0}, 0);
}

// YaRN rope scaling (Qwen3's long-context setting): its attention factor folds into the softmax
// scale of the forward and the backward alike.
TEST(GpuLoraGradientsYarn, Qwen3WithYarnMatchesTheCpuEngine) {
  SPINDLE_REQUIRE_GPU();
  engine::ModelConfig c = gpu_tiny_config(Arch::qwen3);
  c.rope_scaling = engine::RopeScaling{
      .type = engine::RopeScalingType::yarn, .factor = 4.0f, .original_max_position = 16};
  ASSERT_NE(engine::attention_softmax_scale(c), 1.0f / std::sqrt(float(c.head_dim)));
  for (LossFn fn : {LossFn::cross_entropy, LossFn::ppo}) {
    expect_cpu_gradients(c, "qwen3 yarn", fn, 70, {40, 9, 33}, {0, 2, 0}, 5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    ArchsAndLosses, GpuLoraGradients,
    ::testing::Combine(::testing::Values(Arch::llama, Arch::qwen3, Arch::qwen3_moe,
                                         Arch::deepseek_v3),
                       ::testing::Values(LossFn::cross_entropy, LossFn::importance_sampling,
                                         LossFn::ppo, LossFn::cispo, LossFn::dro)),
    [](const auto& info) {
      return std::string(arch_name(std::get<0>(info.param))) + "_" +
             loss_fn_name(std::get<1>(info.param));
    });

}  // namespace
}  // namespace spindle::engine_cuda
