// Queue limits, stop with and without draining, invalid jobs and throwing callbacks: every
// `done` is called exactly once and the engine thread survives.

#include <gtest/gtest.h>

#include "scheduler_fixtures.h"

namespace spindle::scheduler {
namespace {

using testing::SampleWaiter;

SampleJob base_job(int32_t first, int32_t max_tokens = 8) {
  SampleJob job;
  job.prompt = {1, first, 7};
  job.params.max_tokens = max_tokens;
  return job;
}

TEST(SchedulerLifecycle, RefusesBeyondMaxQueuedAndStopWithoutDrainFailsTheRest) {
  auto env = testing::tiny_env();
  env->add_adapter("x", 2, 1);
  env->source.hold("x");
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, {.max_queued = 3});
  std::vector<SampleWaiter> w(3);
  for (int i = 0; i < 3; ++i) {
    SampleJob j = base_job(10 + i);
    j.adapter_key = "x";  // parks: counts as queued until it runs
    j.done = w[size_t(i)].callback();
    ASSERT_TRUE(sched.submit_sample(std::move(j)));
  }
  bool called = false;
  SampleJob extra = base_job(20);
  extra.done = [&](auto) { called = true; };
  EXPECT_FALSE(sched.submit_sample(std::move(extra)));
  LogprobsJob lp;
  lp.tokens = {1, 2, 3};
  EXPECT_FALSE(sched.submit_logprobs(lp));

  sched.stop(/*drain=*/false);
  for (auto& x : w) {
    auto out = x.get();
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error.code, ErrorCode::resource);
    EXPECT_NE(out.error.message.find("shutting down"), std::string::npos) << out.error.message;
  }
  EXPECT_FALSE(called);
  EXPECT_FALSE(sched.submit_sample(base_job(5)));  // stopped
  sched.stop();  // idempotent
}

TEST(SchedulerLifecycle, StopWithDrainCompletesEveryAdmittedJob) {
  auto env = testing::tiny_env();
  env->add_adapter("y", 4, 2);  // cold, but its load is not held
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, {.token_budget = 8});
  std::vector<SampleJob> jobs;
  std::vector<SampleWaiter> w(12);
  for (int i = 0; i < 12; ++i) {
    SampleJob j = base_job(30 + i, 12);
    if (i % 3 == 0) j.adapter_key = "y";
    j.params.seed = uint64_t(i);
    jobs.push_back(j);
    j.done = w[size_t(i)].callback();
    ASSERT_TRUE(sched.submit_sample(std::move(j)));
  }
  sched.stop(/*drain=*/true);
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_TRUE(w[i].ready()) << "stop(drain) returned before job " << i << " finished";
    auto out = w[i].get();
    ASSERT_TRUE(out.ok()) << out.error.message;
    testing::expect_same(*out.value, env->alone(jobs[i]), "job " + std::to_string(i));
  }
  testing::Waiter<SessionId> opened;
  sched.open_session(engine::LoraWeights{}, {}, opened.callback());
  auto o = opened.get();  // refused at once, through done
  EXPECT_FALSE(o.ok());
}

TEST(SchedulerLifecycle, InvalidJobsFailThroughDoneAndThrowingCallbacksAreContained) {
  auto env = testing::tiny_env();
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, {.kv_blocks = 8});
  auto expect_invalid = [&](SampleJob j, ErrorCode code) {
    SampleWaiter w;
    j.done = w.callback();
    ASSERT_TRUE(sched.submit_sample(std::move(j)));
    auto out = w.get();
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error.code, code) << out.error.message;
  };
  SampleJob j = base_job(3);
  j.prompt.clear();
  expect_invalid(j, ErrorCode::invalid_argument);
  j = base_job(500);  // outside the vocab
  expect_invalid(j, ErrorCode::invalid_argument);
  j = base_job(3);
  j.params.stop_strings = {"x"};  // no tokenizer
  expect_invalid(j, ErrorCode::invalid_argument);
  j = base_job(3);
  j.params.top_p = 0.0f;
  expect_invalid(j, ErrorCode::invalid_argument);
  j = base_job(3, 60);
  j.num_samples = 16;  // needs more KV blocks than the whole cache
  expect_invalid(j, ErrorCode::resource);

  testing::Waiter<std::vector<float>> lp;
  LogprobsJob l;
  l.done = lp.callback();
  ASSERT_TRUE(sched.submit_logprobs(l));
  EXPECT_EQ(lp.get().error.code, ErrorCode::invalid_argument);

  // A callback that throws does not take the engine down.
  SampleJob thrower = base_job(4);
  thrower.done = [](auto) { throw std::runtime_error("callback bug"); };
  ASSERT_TRUE(sched.submit_sample(std::move(thrower)));
  SampleWaiter after;
  SampleJob next = base_job(5);
  const SampleJob want = next;
  next.done = after.callback();
  ASSERT_TRUE(sched.submit_sample(std::move(next)));
  auto out = after.get();
  ASSERT_TRUE(out.ok());
  testing::expect_same(*out.value, env->alone(want), "after a throwing callback");
  sched.stop();
  EXPECT_EQ(sched.stats().jobs_failed, 6u);
  EXPECT_EQ(sched.stats().jobs_done, 2u);
}

}  // namespace
}  // namespace spindle::scheduler
