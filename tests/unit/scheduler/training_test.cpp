// Training sessions: forward_backward heads of several sessions share one LoraTrainer pass and
// each session still gets exactly what it gets trained alone; a session's jobs run in order.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "scheduler_fixtures.h"
#include "spindle/engine/trainer.h"

namespace spindle::scheduler {
namespace {

using testing::Waiter;

using spindle::testing::max_abs_diff;

std::vector<engine::TrainDatum> random_data(const engine::ModelConfig& c, uint32_t seed,
                                            bool rl) {
  std::mt19937 rng(seed);
  std::vector<engine::TrainDatum> data(2);
  for (auto& d : data) {
    const size_t n = 4 + rng() % 9;
    for (size_t t = 0; t < n; ++t) {
      d.input_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
      d.target_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
      d.weights.push_back(t < 2 ? 0.0f : 1.0f);
      if (rl) {
        d.logprobs.push_back(-4.0f - float(rng() % 100) / 100.0f);
        d.advantages.push_back(float(int(rng() % 5) - 2) * 0.5f);
      }
    }
  }
  return data;
}

SessionId open(Scheduler& s, engine::LoraWeights w) {
  Waiter<SessionId> opened;
  s.open_session(std::move(w), {}, opened.callback());
  auto out = opened.get();
  EXPECT_TRUE(out.ok()) << out.error.message;
  return out.ok() ? *out.value : 0;
}

// `tokens_per_pass` 0: the merged group fits one trainer call; 1: every datum is its own call
// (the cap that bounds activation memory), and gradients must still sum exactly.
void check_merged_equals_alone(int64_t tokens_per_pass) {
  auto env = testing::tiny_env();
  const engine::ModelConfig& c = env->weights.config;
  const SchedulerOptions options{.training_slots = 3,
                                 .training_max_rank = 8,
                                 .train_tokens_per_pass = tokens_per_pass};
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, options);
  const int64_t ranks[2] = {4, 8};
  std::vector<engine::LoraWeights> init;
  std::vector<SessionId> ids;
  for (int k = 0; k < 2; ++k) {
    init.push_back(engine::LoraWeights::random(c, ranks[k], 2.0f * float(ranks[k]),
                                               testing::kAllTargets, 50 + uint64_t(k), 0.2f,
                                               0.1f));
    ids.push_back(open(sched, init.back().clone()));
  }
  const std::vector<engine::TrainDatum> data[2] = {random_data(c, 1, true),
                                                    random_data(c, 2, true)};
  const engine::LossFn fn = engine::LossFn::ppo;
  // eps well above rounding: with a near-zero eps AdamW's first update is lr·sign(g), and an
  // element whose gradient is below the CPU/GPU rounding difference would land 2·lr apart.
  const engine::AdamParams adam{.learning_rate = 1e-2f, .eps = 1e-4f, .weight_decay = 0.01f};
  // The CUDA instance compares another device's sums (other order, fp32) with the CPU's.
  const bool cpu = spindle::testing::testing_cpu();

  std::vector<Waiter<TrainBatchResult>> fb(2);
  std::vector<Waiter<engine::OptimStepResult>> step(2);
  std::vector<Waiter<SessionSnapshot>> snap(2);
  {
    testing::Gate gate(sched);  // both forward_backward heads reach the engine together
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(sched.submit_forward_backward(ids[size_t(k)], data[k], fn, {}, true,
                                                fb[size_t(k)].callback()));
      ASSERT_TRUE(sched.submit_optim_step(ids[size_t(k)], adam, step[size_t(k)].callback()));
      ASSERT_TRUE(sched.submit_snapshot(ids[size_t(k)], true, snap[size_t(k)].callback()));
    }
  }
  for (int k = 0; k < 2; ++k) {
    auto f = fb[size_t(k)].get();
    auto st = step[size_t(k)].get();
    auto sn = snap[size_t(k)].get();
    ASSERT_TRUE(f.ok() && st.ok() && sn.ok()) << f.error.message << st.error.message;

    // The same session trained alone, directly.
    engine::LoraSlotPool pool(c, {.max_slots = 3, .max_rank = 8});
    engine::LoraTrainer alone(env->model, pool);
    alone.attach(0, init[size_t(k)].clone());
    std::vector<engine::TrainDatum> d = data[k];
    for (auto& x : d) x.slot = 0;
    const engine::ForwardBackwardOutput want = alone.forward_backward(d, fn);
    const engine::OptimStepResult want_step = alone.optim_step(0, adam);

    ASSERT_EQ(f.value->logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < want.logprobs.size(); ++i)
      for (size_t t = 0; t < want.logprobs[i].size(); ++t)
        EXPECT_NEAR(f.value->logprobs[i][t], want.logprobs[i][t], cpu ? 1e-5f : 2e-5f);
    EXPECT_NEAR(f.value->metrics.loss, want.metrics.loss, 1e-4 * (1 + std::abs(want.metrics.loss)));
    EXPECT_EQ(f.value->metrics.n_tokens, want.metrics.n_tokens);
    EXPECT_EQ(f.value->metrics.n_clipped, want.metrics.n_clipped);
    EXPECT_NEAR(st.value->grad_norm, want_step.grad_norm,
                (cpu ? 1e-5 : 1e-4) * (1 + want_step.grad_norm));
    EXPECT_EQ(st.value->step, 1);
    // The snapshot was queued after the step and sees it.
    EXPECT_EQ(sn.value->step, 1);
    EXPECT_LT(max_abs_diff(*sn.value->weights, alone.weights(0)), cpu ? 1e-5f : 2e-4f);
    EXPECT_GT(max_abs_diff(*sn.value->weights, init[size_t(k)]), 1e-4f);
    ASSERT_NE(sn.value->optimizer, nullptr);
    EXPECT_EQ(sn.value->optimizer->step_count(), 1);
    const auto& m_got = sn.value->optimizer->moments();
    const auto& m_want = alone.optimizer(0).moments();
    ASSERT_EQ(m_got.size(), m_want.size());
    for (const auto& [name, mv] : m_want) {
      const auto& g = m_got.at(name);
      // After one step m = (1 − β1)·g and v = (1 − β2)·g²: gradients agree to 1e-5 on the CPU,
      // to 2e-4 of the tensor's largest gradient on another device.
      float scale = 0.0f;
      for (int64_t i = 0; i < mv.first.numel(); ++i)
        scale = std::max(scale, std::abs(mv.first.data()[i] / 0.1f));
      const float tol = cpu ? 1e-5f : 2e-4f * std::max(1e-2f, scale);
      for (int64_t i = 0; i < mv.first.numel(); ++i) {
        EXPECT_NEAR(g.first.data()[i] / 0.1f, mv.first.data()[i] / 0.1f, tol) << name;
        EXPECT_NEAR(std::sqrt(g.second.data()[i] / 0.05f), std::sqrt(mv.second.data()[i] / 0.05f),
                    tol)
            << name;
      }
    }
  }
  testing::settle(sched);
  const SchedulerStats s = sched.stats();
  EXPECT_EQ(s.train_jobs_merged, 2u);
  size_t n_data = 0;
  for (const auto& d : data) n_data += d.size();
  EXPECT_EQ(s.train_passes, 1u);
  EXPECT_EQ(s.train_calls, tokens_per_pass == 1 ? n_data : 1u);
  EXPECT_EQ(s.sessions, 2u);
}

TEST(SchedulerTraining, MergedForwardBackwardEqualsEachSessionAlone) {
  check_merged_equals_alone(/*tokens_per_pass=*/0);
}

TEST(SchedulerTraining, ChunkedMergedPassStillEqualsEachSessionAlone) {
  check_merged_equals_alone(/*tokens_per_pass=*/1);
}

TEST(SchedulerTraining, DifferentLossesDoNotMergeAndOrderHoldsPerSession) {
  auto env = testing::tiny_env();
  const engine::ModelConfig& c = env->weights.config;
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency,
                  {.training_slots = 2, .training_max_rank = 4});
  const auto w0 = engine::init_lora(c, 4, 8.0f, testing::kAllTargets, 1);
  const SessionId a = open(sched, w0.clone());
  const SessionId b = open(sched, w0.clone());
  // A third session does not fit in two training slots.
  Waiter<SessionId> third;
  sched.open_session(w0.clone(), {}, third.callback());
  auto t = third.get();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error.code, ErrorCode::resource);

  std::vector<Waiter<TrainBatchResult>> fb(3);
  Waiter<SessionSnapshot> before, after;
  Waiter<engine::OptimStepResult> step;
  {
    testing::Gate gate(sched);
    ASSERT_TRUE(sched.submit_forward_backward(a, random_data(c, 3, false),
                                              engine::LossFn::cross_entropy, {}, true,
                                              fb[0].callback()));
    ASSERT_TRUE(sched.submit_forward_backward(b, random_data(c, 4, true),
                                              engine::LossFn::importance_sampling, {}, true,
                                              fb[1].callback()));
    ASSERT_TRUE(sched.submit_snapshot(a, false, before.callback()));
    ASSERT_TRUE(sched.submit_optim_step(a, {.learning_rate = 0.05f}, step.callback()));
    ASSERT_TRUE(sched.submit_snapshot(a, false, after.callback()));
    // forward only: logprobs and loss, no gradient
    ASSERT_TRUE(sched.submit_forward_backward(b, random_data(c, 5, false),
                                              engine::LossFn::cross_entropy, {}, false,
                                              fb[2].callback()));
  }
  for (auto& f : fb) ASSERT_TRUE(f.get().ok());
  auto s0 = before.get(), s1 = after.get();
  ASSERT_TRUE(s0.ok() && s1.ok() && step.get().ok());
  EXPECT_EQ(s0.value->step, 0);
  EXPECT_EQ(s1.value->step, 1);
  EXPECT_EQ(s0.value->optimizer, nullptr);  // not asked for
  EXPECT_LT(max_abs_diff(*s0.value->weights, w0), 1e-7f);  // gradient only, not yet applied
  EXPECT_GT(max_abs_diff(*s1.value->weights, w0), 1e-4f);
  testing::settle(sched);
  SchedulerStats s = sched.stats();
  EXPECT_EQ(s.train_jobs_merged, 0u);
  EXPECT_EQ(s.train_passes, 3u);

  // load replaces weights and optimizer; close frees the slot; the closed id is refused.
  Waiter<int64_t> loaded;
  ASSERT_TRUE(sched.submit_load(b, w0.clone(), {}, loaded.callback()));
  Waiter<SessionSnapshot> after_load;
  ASSERT_TRUE(sched.submit_snapshot(b, false, after_load.callback()));
  Waiter<bool> closed;
  sched.close_session(b, closed.callback());
  Waiter<engine::OptimStepResult> refused;
  ASSERT_TRUE(sched.submit_optim_step(b, {}, refused.callback()));
  auto l = loaded.get();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l.value, 0);
  auto al = after_load.get();
  ASSERT_TRUE(al.ok());
  EXPECT_LT(max_abs_diff(*al.value->weights, w0), 1e-7f);
  EXPECT_TRUE(closed.get().ok());
  auto r = refused.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error.code, ErrorCode::not_found);
  EXPECT_NE(open(sched, w0.clone()), 0u);  // the freed slot takes a new session

  // Bad data fails its own job only.
  Waiter<TrainBatchResult> bad;
  std::vector<engine::TrainDatum> bad_data = random_data(c, 6, false);
  bad_data[0].target_tokens.pop_back();
  ASSERT_TRUE(sched.submit_forward_backward(a, bad_data, engine::LossFn::cross_entropy, {}, true,
                                            bad.callback()));
  auto br = bad.get();
  ASSERT_FALSE(br.ok());
  EXPECT_EQ(br.error.code, ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace spindle::scheduler
