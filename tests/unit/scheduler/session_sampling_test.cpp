// Sampling and scoring on a training session's live weights (SampleJob::session): the result
// equals engine::Generator alone on the same weights, a job queued after an optim_step sees the
// updated weights, and misuse fails with a typed error.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>

#include "scheduler_fixtures.h"
#include "spindle/engine/trainer.h"

namespace spindle::scheduler {
namespace {

using testing::SampleWaiter;
using testing::Waiter;

SessionId open(Scheduler& s, engine::LoraWeights w) {
  Waiter<SessionId> opened;
  s.open_session(std::move(w), {}, opened.callback());
  auto out = opened.get();
  EXPECT_TRUE(out.ok()) << out.error.message;
  return out.ok() ? *out.value : 0;
}

// Generator alone with `weights` in slot 0 of a pool shaped like the scheduler's training pool.
std::vector<engine::Completion> alone(testing::Env& env, const engine::LoraWeights& weights,
                                      const SampleJob& job) {
  engine::LoraSlotPool pool(env.weights.config, {.max_slots = 2, .max_rank = 8});
  pool.load(0, weights);
  engine::KvCache kv(env.weights.config,
                     {.block_size = 16, .n_blocks = 0, .max_seqs = job.num_samples + 1});
  engine::Generator gen(env.model, kv, &pool, nullptr);
  engine::GenerationRequest r;
  r.prompt = job.prompt;
  r.slot = 0;
  r.num_samples = job.num_samples;
  r.params = job.params;
  return gen.generate({r}).at(0);
}

SampleJob sample_job(SessionId id, std::vector<int32_t> prompt, uint64_t seed) {
  SampleJob job;
  job.tenant = "t";
  job.session = id;
  job.prompt = std::move(prompt);
  job.num_samples = 3;
  job.params.max_tokens = 8;
  job.params.temperature = 1.0f;
  job.params.seed = seed;
  return job;
}

const SchedulerOptions kOptions{.training_slots = 2, .training_max_rank = 8};

TEST(SchedulerSessionSampling, SessionSamplesEqualGeneratorAloneAndBatchWithServing) {
  auto env = testing::tiny_env();
  const engine::ModelConfig& c = env->weights.config;
  env->add_adapter("served", 4, 7, /*warm=*/true);
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, kOptions);
  const engine::LoraWeights w =
      engine::LoraWeights::random(c, 8, 16.0f, testing::kAllTargets, 11, 0.3f, 0.3f);
  const SessionId id = open(sched, w.clone());

  SampleWaiter session_out, served_out;
  const SampleJob job = sample_job(id, {1, 5, 9, 12}, 77);
  SampleJob served = sample_job(0, {1, 3, 4}, 5);
  served.session.reset();
  served.adapter_key = "served";
  {
    testing::Gate gate(sched);  // both reach the engine in one intake and share steps
    SampleJob j = job;
    j.done = session_out.callback();
    ASSERT_TRUE(sched.submit_sample(std::move(j)));
    SampleJob s = served;
    s.done = served_out.callback();
    ASSERT_TRUE(sched.submit_sample(std::move(s)));
  }
  auto got = session_out.get();
  ASSERT_TRUE(got.ok()) << got.error.message;
  testing::expect_same(*got.value, alone(*env, w, job), "session sample");
  auto got_served = served_out.get();
  ASSERT_TRUE(got_served.ok()) << got_served.error.message;
  testing::expect_same(*got_served.value, env->alone(served), "served sample");
  testing::settle(sched);
  EXPECT_EQ(sched.stats().session_sample_jobs, 1u);
}

TEST(SchedulerSessionSampling, SampleQueuedAfterOptimStepSeesNewWeights) {
  auto env = testing::tiny_env();
  const engine::ModelConfig& c = env->weights.config;
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, kOptions);
  const engine::LoraWeights w =
      engine::LoraWeights::random(c, 8, 16.0f, testing::kAllTargets, 3, 0.3f, 0.3f);
  const SessionId id = open(sched, w.clone());

  engine::TrainDatum d;
  d.input_tokens = {1, 5, 9, 12, 20, 30};
  d.target_tokens = {5, 9, 12, 20, 30, 40};
  // Submitted back to back without waiting: sample, fb, step, sample, snapshot.
  SampleWaiter before, after;
  Waiter<TrainBatchResult> fb;
  Waiter<engine::OptimStepResult> step;
  Waiter<SessionSnapshot> snap;
  SampleJob j1 = sample_job(id, {1, 5, 9}, 1);
  j1.done = before.callback();
  ASSERT_TRUE(sched.submit_sample(j1));
  ASSERT_TRUE(sched.submit_forward_backward(id, {d}, engine::LossFn::cross_entropy, {}, true,
                                            fb.callback()));
  ASSERT_TRUE(sched.submit_optim_step(id, {.learning_rate = 0.05f}, step.callback()));
  SampleJob j2 = sample_job(id, {1, 5, 9}, 1);
  j2.done = after.callback();
  ASSERT_TRUE(sched.submit_sample(j2));
  ASSERT_TRUE(sched.submit_snapshot(id, false, snap.callback()));

  auto b = before.get();
  auto a = after.get();
  auto sn = snap.get();
  ASSERT_TRUE(b.ok() && a.ok() && sn.ok() && step.get().ok() && fb.get().ok());
  testing::expect_same(*b.value, alone(*env, w, j1), "before the step");
  testing::expect_same(*a.value, alone(*env, *sn.value->weights, j2), "after the step");
  // The step moved the weights far enough that the same seed scores the prompt differently.
  EXPECT_GT(std::abs(a.value->at(0).logprobs.at(0) - b.value->at(0).logprobs.at(0)), 1e-4f);
}

TEST(SchedulerSessionSampling, SessionLogprobsEqualTrainerForward) {
  auto env = testing::tiny_env();
  const engine::ModelConfig& c = env->weights.config;
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, kOptions);
  const engine::LoraWeights w =
      engine::LoraWeights::random(c, 4, 8.0f, testing::kAllTargets, 9, 0.3f, 0.3f);
  const SessionId id = open(sched, w.clone());
  const std::vector<int32_t> tokens = {1, 7, 8, 9, 30, 31, 40};

  Waiter<std::vector<float>> lp;
  LogprobsJob job;
  job.tenant = "t";
  job.session = id;
  job.tokens = tokens;
  job.done = lp.callback();
  ASSERT_TRUE(sched.submit_logprobs(job));
  auto got = lp.get();
  ASSERT_TRUE(got.ok()) << got.error.message;

  engine::LoraSlotPool pool(c, {.max_slots = 1, .max_rank = 8});
  engine::LoraTrainer trainer(env->model, pool);
  trainer.attach(0, w.clone());
  engine::TrainDatum d;
  d.input_tokens.assign(tokens.begin(), tokens.end() - 1);
  d.target_tokens.assign(tokens.begin() + 1, tokens.end());
  d.slot = 0;
  const auto want = trainer.forward({&d, 1}, engine::LossFn::cross_entropy);
  ASSERT_EQ(got.value->size(), tokens.size());
  EXPECT_TRUE(std::isnan(got.value->at(0)));
  for (size_t i = 1; i < tokens.size(); ++i)
    EXPECT_NEAR(got.value->at(i), want.logprobs[0][i - 1], 1e-4f) << i;
}

TEST(SchedulerSessionSampling, MisuseFailsWithTypedErrors) {
  auto env = testing::tiny_env();
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, kOptions);
  SampleWaiter unknown;
  SampleJob j = sample_job(42, {1, 2}, 0);
  j.done = unknown.callback();
  ASSERT_TRUE(sched.submit_sample(j));
  auto u = unknown.get();
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.error.code, ErrorCode::not_found);

  const SessionId id = open(sched, engine::init_lora(env->weights.config, 4, 4.0f,
                                                      testing::kAllTargets, 1));
  SampleWaiter both;
  SampleJob k = sample_job(id, {1, 2}, 0);
  k.adapter_key = "something";
  k.done = both.callback();
  ASSERT_TRUE(sched.submit_sample(k));
  auto b = both.get();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error.code, ErrorCode::invalid_argument);
  // The failed job does not block the session: a close still completes.
  Waiter<bool> closed;
  sched.close_session(id, closed.callback());
  EXPECT_TRUE(closed.get().ok());
}

// save_weights' handoff: a snapshot published (submit_publish) sits in a serving slot under
// its provisional key; renamed to the blob id, the first request for that id is a device hit that
// never asks the loader (whose source does not know the id: a load would fail the job) and
// samples exactly the snapshot's weights. A save that failed frees its slot.
TEST(SchedulerSessionSampling, PublishedSnapshotServesItsFirstRequestFromASlot) {
  auto env = testing::tiny_env();
  const engine::ModelConfig& c = env->weights.config;
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, kOptions);
  const SessionId id = open(
      sched, engine::LoraWeights::random(c, 4, 8.0f, testing::kAllTargets, 21, 0.3f, 0.3f));
  engine::TrainDatum d;
  d.input_tokens = {1, 5, 9, 12};
  d.target_tokens = {5, 9, 12, 20};
  Waiter<TrainBatchResult> fb;
  Waiter<engine::OptimStepResult> step;
  Waiter<SessionSnapshot> snap;
  ASSERT_TRUE(sched.submit_forward_backward(id, {d}, engine::LossFn::cross_entropy, {}, true,
                                            fb.callback()));
  ASSERT_TRUE(sched.submit_optim_step(id, {.learning_rate = 0.05f}, step.callback()));
  ASSERT_TRUE(sched.submit_snapshot(id, false, snap.callback()));
  auto sn = snap.get();
  ASSERT_TRUE(sn.ok() && fb.get().ok() && step.get().ok());
  const std::string published_as = sched.submit_publish(sn.value->weights);
  ASSERT_FALSE(published_as.empty());
  ASSERT_TRUE(sched.submit_rekey(published_as, "blob-of-the-save"));

  SampleJob job;
  job.tenant = "t";
  job.adapter_key = "blob-of-the-save";
  job.prompt = {1, 5, 9};
  job.num_samples = 2;
  job.params.max_tokens = 6;
  job.params.temperature = 1.0f;
  job.params.seed = 3;
  SampleWaiter served;
  SampleJob submitted = job;
  submitted.done = served.callback();
  ASSERT_TRUE(sched.submit_sample(std::move(submitted)));
  auto out = served.get();
  ASSERT_TRUE(out.ok()) << out.error.message;
  testing::expect_same(*out.value, alone(*env, *sn.value->weights, job), "published snapshot");
  // The engine thread publishes its stats after each step: run fence jobs (bounded) until
  // they show `settled`.
  auto stats_once = [&](const std::function<bool(const SchedulerStats&)>& settled) {
    SchedulerStats st = sched.stats();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!settled(st) && std::chrono::steady_clock::now() < deadline) {
      Waiter<SessionSnapshot> fence;
      EXPECT_TRUE(sched.submit_snapshot(id, false, fence.callback()));
      EXPECT_TRUE(fence.get().ok());
      st = sched.stats();
    }
    return st;
  };
  SchedulerStats s = stats_once([](const SchedulerStats& st) { return st.residency.acquires > 0; });
  EXPECT_EQ(s.residency.published, 1u);
  EXPECT_EQ(s.residency.device_hits, 1u);
  EXPECT_EQ(s.residency.cold_parks, 0u);

  // A save whose commit failed: its provisional slot is freed, the saved one stays.
  Waiter<SessionSnapshot> failed;
  ASSERT_TRUE(sched.submit_snapshot(id, false, failed.callback()));
  auto fs = failed.get();
  ASSERT_TRUE(fs.ok());
  const std::string provisional = sched.submit_publish(fs.value->weights);
  ASSERT_NE(provisional, published_as) << "each publish has its own key";
  ASSERT_TRUE(sched.submit_rekey(provisional, ""));
  auto placed = [](const SchedulerStats& st, const std::string& key) {
    for (const auto& p : st.placements)
      if (p.revision_id == key && p.tier == adapters::ResidencyTier::device) return true;
    return false;
  };
  s = stats_once([&](const SchedulerStats& st) {
    return st.residency.published == 2 && !placed(st, provisional);
  });
  EXPECT_EQ(s.residency.published, 2u);
  EXPECT_FALSE(placed(s, provisional));
  EXPECT_TRUE(placed(s, "blob-of-the-save"));
}

}  // namespace
}  // namespace spindle::scheduler
