// SampleJob::progress (streaming): across a concurrent mix of jobs, every job's deltas
// concatenate to exactly its completions, come in sequence order with at least one token each,
// name the token before their first one (prev), and all arrive before done; a job that fails gets
// no further progress call.

#include <gtest/gtest.h>

#include <mutex>

#include "scheduler_fixtures.h"

namespace spindle::scheduler {
namespace {

using testing::SampleWaiter;

struct Recorded {
  std::mutex mutex;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  size_t calls = 0;
  bool order_ok = true;
  bool after_done = false;
  bool done = false;
};

TEST(SchedulerProgress, DeltasConcatenateToTheCompletions) {
  auto env = testing::tiny_env();
  env->add_adapter("a", 4, 1, /*warm=*/true);
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency,
                  {.token_budget = 16, .max_running = 16, .kv_blocks = 128});
  constexpr int kJobs = 6;
  std::vector<SampleJob> jobs(kJobs);
  std::vector<Recorded> rec(kJobs);
  std::vector<SampleWaiter> waiters(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    SampleJob& job = jobs[size_t(i)];
    job.tenant = "t" + std::to_string(i % 2);
    job.adapter_key = i % 2 ? "a" : "";
    job.prompt = {1, int32_t(5 + i), 7, 9};
    job.num_samples = 1 + i % 3;
    job.params.max_tokens = 3 + 2 * i;
    job.params.temperature = i % 2 ? 0.9f : 0.0f;
    job.params.seed = uint64_t(40 + i);
    if (i == 4) job.params.stop_token_ids = {2};
    Recorded& r = rec[size_t(i)];
    r.tokens.resize(size_t(job.num_samples));
    r.logprobs.resize(size_t(job.num_samples));
    SampleJob submitted = job;
    submitted.progress = [&r,
                          prompt_last = job.prompt.back()](std::span<const SampleDelta> deltas) {
      std::lock_guard lock(r.mutex);
      ++r.calls;
      if (r.done) r.after_done = true;
      int32_t last = -1;
      for (const SampleDelta& d : deltas) {
        if (d.sequence <= last || d.tokens.empty() || d.tokens.size() != d.logprobs.size()) {
          r.order_ok = false;
        }
        last = d.sequence;
        const auto& so_far = r.tokens.at(size_t(d.sequence));
        if (d.prev != (so_far.empty() ? prompt_last : so_far.back())) r.order_ok = false;
        r.tokens.at(size_t(d.sequence)).insert(r.tokens[size_t(d.sequence)].end(),
                                               d.tokens.begin(), d.tokens.end());
        r.logprobs.at(size_t(d.sequence)).insert(r.logprobs[size_t(d.sequence)].end(),
                                                 d.logprobs.begin(), d.logprobs.end());
      }
    };
    auto inner = waiters[size_t(i)].callback();
    submitted.done = [&r, inner](Outcome<std::vector<engine::Completion>> o) {
      {
        std::lock_guard lock(r.mutex);
        r.done = true;
      }
      inner(std::move(o));
    };
    ASSERT_TRUE(sched.submit_sample(std::move(submitted)));
  }
  for (int i = 0; i < kJobs; ++i) {
    auto out = waiters[size_t(i)].get();
    ASSERT_TRUE(out.ok()) << out.error.message;
    const Recorded& r = rec[size_t(i)];
    EXPECT_TRUE(r.order_ok) << "job " << i;
    EXPECT_FALSE(r.after_done) << "job " << i;
    EXPECT_GE(r.calls, 1u);
    for (size_t s = 0; s < out.value->size(); ++s) {
      EXPECT_EQ(r.tokens[s], (*out.value)[s].tokens) << "job " << i << " sample " << s;
      EXPECT_EQ(r.logprobs[s], (*out.value)[s].logprobs) << "job " << i << " sample " << s;
    }
    // The same job without progress gives the same completions.
    testing::expect_same(*out.value, env->alone(jobs[size_t(i)]), "job " + std::to_string(i));
  }
  sched.stop();
}

TEST(SchedulerProgress, InvalidJobGetsNoProgress) {
  auto env = testing::tiny_env();
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency);
  SampleJob job;
  job.tenant = "t";
  job.prompt = {};  // invalid: fails through done
  size_t calls = 0;
  job.progress = [&calls](std::span<const SampleDelta>) { ++calls; };
  SampleWaiter w;
  job.done = w.callback();
  ASSERT_TRUE(sched.submit_sample(std::move(job)));
  EXPECT_FALSE(w.get().ok());
  sched.stop();
  EXPECT_EQ(calls, 0u);
}

// A throwing progress callback is the service's bug, not the job's: the engine keeps running,
// the job still completes with the same tokens, and every throw reaches on_fault (the daemon's
// log) and SchedulerStats::faults, never swallowed silently.
TEST(SchedulerProgress, AThrowingCallbackIsReportedAndTheJobStillCompletes) {
  auto env = testing::tiny_env();
  std::mutex mutex;
  std::vector<std::string> faults;
  SchedulerOptions options{.token_budget = 16, .max_running = 16, .kv_blocks = 128};
  options.on_fault = [&](const std::string& message) {
    std::lock_guard lock(mutex);
    faults.push_back(message);
  };
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, options);
  const auto make_job = [] {
    SampleJob job;
    job.tenant = "t";
    job.prompt = {1, 5, 7, 9};
    job.params.max_tokens = 6;
    job.params.temperature = 0.0f;
    return job;
  };
  SampleJob throwing = make_job();
  size_t calls = 0;
  throwing.progress = [&calls](std::span<const SampleDelta>) {
    ++calls;
    throw std::runtime_error("callback bug");
  };
  SampleWaiter thrown, plain;
  throwing.done = thrown.callback();
  ASSERT_TRUE(sched.submit_sample(std::move(throwing)));
  auto got = thrown.get();
  SampleJob reference = make_job();
  reference.done = plain.callback();
  ASSERT_TRUE(sched.submit_sample(std::move(reference)));
  auto want = plain.get();
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(got.value->at(0).tokens, want.value->at(0).tokens);
  EXPECT_GE(calls, 1u);
  const SchedulerStats stats = sched.stats();
  sched.stop();
  std::lock_guard lock(mutex);
  EXPECT_EQ(faults.size(), calls);
  EXPECT_EQ(stats.faults, calls);
  ASSERT_FALSE(faults.empty());
  EXPECT_NE(faults[0].find("progress callback"), std::string::npos) << faults[0];
  EXPECT_NE(faults[0].find("callback bug"), std::string::npos) << faults[0];
}

}  // namespace
}  // namespace spindle::scheduler
