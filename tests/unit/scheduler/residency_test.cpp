// Cold adapters park without stalling the batch loop; failed loads fail only their jobs;
// eviction never takes a slot an in-flight job holds; admission is fair across tenants.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "scheduler_fixtures.h"

namespace spindle::scheduler {
namespace {

using testing::SampleWaiter;

SampleJob job_for(const std::string& key, std::vector<int32_t> prompt, int32_t max_tokens,
                  uint64_t seed = 1, const std::string& tenant = "t") {
  SampleJob job;
  job.tenant = tenant;
  job.adapter_key = key;
  job.prompt = std::move(prompt);
  job.params.max_tokens = max_tokens;
  job.params.seed = seed;
  return job;
}

TEST(SchedulerResidency, ColdAdapterParksWhileWarmWorkCompletes) {
  auto env = testing::tiny_env();
  env->add_adapter("x", 4, 1);               // cold: its load is held back below
  env->add_adapter("y", 8, 2, /*warm=*/true);
  env->source.hold("x");
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency);

  const SampleJob jx = job_for("x", {1, 5, 9}, 12, 4);
  SampleWaiter wx;
  {
    SampleJob j = jx;
    j.done = wx.callback();
    ASSERT_TRUE(sched.submit_sample(std::move(j)));
  }
  ASSERT_TRUE(env->source.wait_started("x"));
  // Work submitted after x's job, for a warm adapter and the base, completes meanwhile.
  std::vector<SampleJob> warm = {job_for("y", {1, 7}, 20, 5), job_for("", {1, 8, 8}, 15, 6),
                                 job_for("y", {1, 2, 3, 4}, 9, 7)};
  std::vector<SampleWaiter> ww(warm.size());
  for (size_t i = 0; i < warm.size(); ++i) {
    SampleJob j = warm[i];
    j.done = ww[i].callback();
    ASSERT_TRUE(sched.submit_sample(std::move(j)));
  }
  for (size_t i = 0; i < warm.size(); ++i) {
    auto out = ww[i].get();
    ASSERT_TRUE(out.ok()) << out.error.message;
    testing::expect_same(*out.value, env->alone(warm[i]), "warm job");
  }
  EXPECT_FALSE(wx.ready());  // its load is still held
  SchedulerStats s = sched.stats();
  EXPECT_EQ(s.parked, 1u);
  const auto px = std::find_if(s.placements.begin(), s.placements.end(),
                               [](const auto& p) { return p.revision_id == "x"; });
  ASSERT_NE(px, s.placements.end());
  EXPECT_EQ(px->tier, adapters::ResidencyTier::loading);

  env->source.release("x");
  auto out = wx.get();
  ASSERT_TRUE(out.ok()) << out.error.message;
  testing::expect_same(*out.value, env->alone(jx), "cold job");
  EXPECT_GE(sched.stats().residency.cold_parks, 1u);
}

TEST(SchedulerResidency, FailedLoadFailsOnlyItsJobsWithTheLoadError) {
  auto env = testing::tiny_env();
  env->add_adapter("y", 2, 2, true);
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency);
  SampleWaiter bad1, bad2, good;
  SampleJob j1 = job_for("missing", {1, 3}, 5), j2 = job_for("missing", {1, 4}, 5);
  const SampleJob jg = job_for("y", {1, 3}, 10);
  j1.done = bad1.callback();
  j2.done = bad2.callback();
  SampleJob g = jg;
  g.done = good.callback();
  ASSERT_TRUE(sched.submit_sample(std::move(j1)));
  ASSERT_TRUE(sched.submit_sample(std::move(g)));
  ASSERT_TRUE(sched.submit_sample(std::move(j2)));
  for (auto* w : {&bad1, &bad2}) {
    auto out = w->get();
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error.code, ErrorCode::not_found);
    EXPECT_NE(out.error.message.find("missing"), std::string::npos) << out.error.message;
  }
  auto out = good.get();
  ASSERT_TRUE(out.ok());
  testing::expect_same(*out.value, env->alone(jg), "good job");
  sched.stop();
  EXPECT_EQ(sched.stats().jobs_failed, 2u);
  // One load serves both jobs when the second arrives while it is pending; a failure is not
  // cached, so a second job admitted after the first load failed starts its own.
  EXPECT_GE(sched.stats().residency.load_failures, 1u);
  EXPECT_LE(sched.stats().residency.load_failures, 2u);
}

TEST(SchedulerResidency, EvictionNeverTakesASlotInUse) {
  auto env = testing::tiny_env({.serving_slots = 2, .max_rank = 8});
  env->add_adapter("a", 8, 1, true);
  env->add_adapter("b", 4, 2, true);
  env->add_adapter("c", 2, 3, true);
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency);
  // Long sequences for a and b hold both slots while c's job arrives.
  std::vector<SampleJob> jobs = {job_for("a", {1, 5}, 50, 1), job_for("b", {1, 6}, 30, 2),
                                 job_for("c", {1, 7}, 20, 3), job_for("a", {1, 8}, 10, 4)};
  jobs[0].num_samples = 2;
  jobs[0].params.temperature = 0.0f;
  std::vector<SampleWaiter> w(jobs.size());
  {
    testing::Gate gate(sched);  // all four reach the engine in one intake
    for (size_t i = 0; i < jobs.size(); ++i) {
      SampleJob j = jobs[i];
      j.done = w[i].callback();
      ASSERT_TRUE(sched.submit_sample(std::move(j)));
    }
  }
  // Watch the placements while the jobs run: never more than two device residents, and the
  // slots in use never exceed what running jobs hold.
  while (!std::all_of(w.begin(), w.end(), [](auto& x) { return x.ready(); })) {
    const SchedulerStats s = sched.stats();
    int device = 0, in_use = 0;
    for (const auto& p : s.placements) {
      device += p.tier == adapters::ResidencyTier::device;
      in_use += p.in_use;
      EXPECT_LE(p.in_use, 2);
    }
    EXPECT_LE(device, 2);
    EXPECT_LE(in_use, 3);
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto out = w[i].get();
    ASSERT_TRUE(out.ok()) << out.error.message;
    testing::expect_same(*out.value, env->alone(jobs[i]), "job " + std::to_string(i));
  }
  sched.stop();
  const SchedulerStats s = sched.stats();
  EXPECT_GE(s.residency.busy_parks, 1u);      // c waited for a slot
  EXPECT_GE(s.residency.slot_evictions, 1u);  // and took one only after its job ended
  for (const auto& p : s.placements) EXPECT_EQ(p.in_use, 0) << p.revision_id;
  EXPECT_EQ(s.device_slots_used, 2);
}

TEST(SchedulerResidency, AdmissionIsRoundRobinAcrossTenants) {
  auto env = testing::tiny_env();
  // Budget 6: each step admits about one new prompt of four tokens.
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency,
                  {.token_budget = 6, .max_running = 4});
  std::atomic<int> finished{0};
  std::vector<int> position_a(50, -1);
  int position_b = -1;
  {
    testing::Gate gate(sched);
    for (int i = 0; i < 50; ++i) {
      SampleJob j = job_for("", {1, int32_t(10 + i % 50), 4, 5}, 4, uint64_t(i), "A");
      j.done = [&, i](Outcome<std::vector<engine::Completion>> o) {
        EXPECT_TRUE(o.ok());
        position_a[size_t(i)] = finished++;
      };
      ASSERT_TRUE(sched.submit_sample(std::move(j)));
    }
    SampleJob b = job_for("", {1, 9, 9, 9}, 4, 99, "B");
    b.done = [&](Outcome<std::vector<engine::Completion>> o) {
      EXPECT_TRUE(o.ok());
      position_b = finished++;
    };
    ASSERT_TRUE(sched.submit_sample(std::move(b)));
  }
  sched.stop(/*drain=*/true);
  EXPECT_EQ(finished.load(), 51);
  ASSERT_GE(position_b, 0);
  EXPECT_LT(position_b, position_a[49]);
  EXPECT_LT(position_b, 5);  // B's turn comes right after A's first job, not after 50
  // FIFO within a tenant: A's jobs finish in submission order (same lengths).
  EXPECT_TRUE(std::is_sorted(position_a.begin(), position_a.end()));
}

}  // namespace
}  // namespace spindle::scheduler

namespace spindle::scheduler {
namespace {

// Past a few hundred placed revisions the placements list is rebuilt at most ten times a
// second instead of after every engine step; it still catches up with every revision.
TEST(SchedulerResidency, LargePlacementListsCatchUp) {
  auto env = testing::tiny_env();
  constexpr int kAdapters = 300;  // past the 256 listed after every step
  for (int i = 0; i < kAdapters; ++i) {
    env->add_adapter("a" + std::to_string(i), 2, uint64_t(100 + i), /*warm=*/true);
  }
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency);
  std::vector<SampleWaiter> w(kAdapters);
  for (int i = 0; i < kAdapters; ++i) {
    SampleJob j = job_for("a" + std::to_string(i), {1, 5}, 1, uint64_t(i));
    j.done = w[size_t(i)].callback();
    ASSERT_TRUE(sched.submit_sample(std::move(j)));
  }
  for (auto& x : w) ASSERT_TRUE(x.get().ok());
  // Every revision was acquired, so each is listed (device or host) once the list is rebuilt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t listed = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    SampleJob poke = job_for("", {1, 2}, 1);  // a step, which publishes the stats
    SampleWaiter done;
    poke.done = done.callback();
    ASSERT_TRUE(sched.submit_sample(std::move(poke)));
    ASSERT_TRUE(done.get().ok());
    listed = sched.stats().placements.size();
    if (listed == size_t(kAdapters)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(listed, size_t(kAdapters));
  for (const auto& p : sched.stats().placements) EXPECT_EQ(p.in_use, 0) << p.revision_id;
}

}  // namespace
}  // namespace spindle::scheduler
