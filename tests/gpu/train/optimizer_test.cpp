// Training steps on the GPU: AdamW steps in fp32 mode equal the CPU trainer's (weights, grad
// norm, clip decision); bf16 mode learns (SFT loss on a fixed batch falls over 20 steps); the
// trainer's input checks.

#include <gtest/gtest.h>

#include "spindle/core/error.h"
#include "train_fixtures.h"

namespace spindle::engine_cuda {
namespace {

using namespace spindle::engine_cuda::testing;

TEST(GpuTrainer, AdamWStepsEqualTheCpuTrainer) {
  SPINDLE_REQUIRE_GPU();
  for (Arch arch : {Arch::llama, Arch::qwen3, Arch::qwen3_moe}) {
    Rig rig(arch, 70 + int(arch), Precision::fp32, {.max_slots = 2, .max_rank = 8});
    const engine::ModelConfig& c = rig.config();
    // PEFT init (B = 0), as a real run starts; rank below the pool's max_rank.
    const LoraWeights init = engine::init_lora(c, 6, 12.0f, kAllTargets, 11);
    rig.cpu_trainer->attach(1, init.clone());
    rig.dev_trainer->attach(1, init);
    auto batch = make_batch(c, {9, 5, 12}, {1, 1, 1}, 31);
    // eps well above the gradients' rounding noise: with ε = 1e-12 an update is lr·sign(g),
    // and a gradient that is zero up to rounding would flip sign between the two devices.
    engine::AdamParams hp{.learning_rate = 1e-2f,
                          .beta1 = 0.9f,
                          .beta2 = 0.95f,
                          .eps = 1e-5f,
                          .weight_decay = 0.1f,
                          .grad_clip_norm = 0.0f};
    for (int step = 1; step <= 4; ++step) {
      hp.grad_clip_norm = step == 3 ? 1e-3f : 0.0f;  // step 3 clips (tiny bound)
      const auto want_fb = rig.cpu_trainer->forward_backward(batch, LossFn::cross_entropy);
      const auto got_fb = rig.dev_trainer->forward_backward(batch, LossFn::cross_entropy);
      EXPECT_NEAR(got_fb.metrics.loss, want_fb.metrics.loss,
                  1e-4 * (1.0 + std::abs(want_fb.metrics.loss)))
          << arch_name(arch) << " step " << step;
      const auto want = rig.cpu_trainer->optim_step(1, hp);
      const auto got = rig.dev_trainer->optim_step(1, hp);
      EXPECT_EQ(got.step, want.step);
      EXPECT_EQ(got.clipped, want.clipped) << arch_name(arch) << " step " << step;
      EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-4 * want.grad_norm + 1e-7)
          << arch_name(arch) << " step " << step;
      expect_lora_close(
          rig.dev_trainer->weights(1), rig.cpu_trainer->weights(1),
          // Adam's update m̂/(√v̂+ε) is a ratio of gradients, so a gradient element that is a
          // near-cancellation (its fp32 sum order differs between devices) moves its weight by a
          // slightly different fraction of lr. Seen on an H200: 3.3e-5 = 0.33% of one lr step
          // on 1 of 576 elements after the clipped step; routed experts add several times the
          // elements, so the bound is 2% of a step. A wrong update is a whole step (1e-2).
          /*rtol=*/1e-4, /*atol=*/2e-2 * hp.learning_rate,
          std::string(arch_name(arch)) + " weights after step " + std::to_string(step));
      // Gradients were zeroed by the step.
      const LoraWeights g = rig.dev_trainer->grads(1);
      engine::for_each_lora_tensor(g, [](const std::string& name, const Tensor& t) {
        for (float x : t.span()) ASSERT_EQ(x, 0.0f) << name;
      });
    }
    EXPECT_EQ(rig.dev_trainer->step_count(1), 4);
  }
}

TEST(GpuTrainer, Bf16SftLossFallsOnAFixedBatch) {
  SPINDLE_REQUIRE_GPU();
  Rig rig(Arch::qwen3, 81, Precision::bf16, {.max_slots = 1, .max_rank = 8});
  const engine::ModelConfig& c = rig.config();
  rig.dev_trainer->attach(0, engine::init_lora(c, 8, 16.0f, kAllTargets, 12));
  auto batch = make_batch(c, {16, 11, 20}, {0, 0, 0}, 41);
  const engine::AdamParams hp{.learning_rate = 1e-2f};
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    const auto out = rig.dev_trainer->forward_backward(batch, LossFn::cross_entropy);
    ASSERT_TRUE(std::isfinite(out.metrics.loss)) << "step " << step;
    ASSERT_EQ(out.metrics.n_tokens, 44);
    losses.push_back(out.metrics.loss / double(out.metrics.n_tokens));
    const auto r = rig.dev_trainer->optim_step(0, hp);
    ASSERT_TRUE(std::isfinite(r.grad_norm)) << "step " << step;
  }
  // From about ln(97) = 4.6 nats per token; 20 Adam steps at lr 1e-2 memorise a good part.
  EXPECT_LT(losses.back(), 0.8 * losses.front())
      << "first " << losses.front() << " last " << losses.back();
  // And the trained adapter, downloaded, is finite and no longer the init (B moved off zero).
  const LoraWeights w = rig.dev_trainer->weights(0);
  double b_norm = 0.0;
  for (const auto& layer : w.modules)
    for (const auto& p : layer) {
      if (p.empty()) continue;
      for (float x : p.A.span()) ASSERT_TRUE(std::isfinite(x));
      for (float x : p.B.span()) b_norm += double(x) * x;
    }
  EXPECT_GT(b_norm, 0.0);
}

TEST(GpuTrainer, RejectsBadBatchesBeforeAnyWork) {
  SPINDLE_REQUIRE_GPU();
  Rig rig(Arch::llama, 90, Precision::fp32, {.max_slots = 2, .max_rank = 4});
  const engine::ModelConfig& c = rig.config();
  rig.dev_trainer->attach(0, engine::init_lora(c, 2, 4.0f, kAllTargets, 1));
  DeviceTrainer& tr = *rig.dev_trainer;
  auto expect_invalid = [&](std::vector<TrainDatum> batch, LossFn fn, const char* what) {
    try {
      tr.forward_backward(batch, fn);
      ADD_FAILURE() << what << ": no error";
    } catch (const spindle::Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << what << ": " << e.what();
    }
  };
  expect_invalid({}, LossFn::cross_entropy, "empty batch");
  auto unattached = make_batch(c, {3}, {1}, 2);
  expect_invalid(unattached, LossFn::cross_entropy, "slot 1 not attached");
  auto bad_len = make_batch(c, {3}, {0}, 3);
  bad_len[0].target_tokens.pop_back();
  expect_invalid(bad_len, LossFn::cross_entropy, "target length");
  auto bad_token = make_batch(c, {3}, {0}, 4);
  bad_token[0].target_tokens[1] = int32_t(c.vocab_size);
  expect_invalid(bad_token, LossFn::cross_entropy, "target outside vocab");
  auto no_adv = make_batch(c, {3}, {0}, 5);
  no_adv[0].advantages.clear();
  expect_invalid(no_adv, LossFn::ppo, "ppo without logprobs and advantages");
  try {
    tr.optim_step(1, {});
    ADD_FAILURE() << "optim_step on an unattached slot: no error";
  } catch (const spindle::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  }
  // The trainer still works after the rejections.
  const auto ok = tr.forward_backward(make_batch(c, {4}, {0}, 6), LossFn::cross_entropy);
  EXPECT_EQ(ok.metrics.n_tokens, 3);
}

}  // namespace
}  // namespace spindle::engine_cuda
