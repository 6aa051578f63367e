// Continuous batching: every request gets exactly what engine::Generator gives it alone, for a
// concurrent mix of adapters, sampling modes, prompt lengths (chunked prefill) and stops;
// compute_logprobs against an independent double-precision reference; the real stories260K
// model with its tokenizer and stop strings.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "scheduler_fixtures.h"
#include "shared_fixtures.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/tokenizer.h"

namespace spindle::scheduler {
namespace {

using testing::Env;
using testing::SampleWaiter;

SampleJob make_job(std::mt19937& rng, int i, const std::vector<std::string>& keys) {
  SampleJob job;
  job.tenant = "tenant" + std::to_string(i % 3);
  job.adapter_key = keys[size_t(i) % keys.size()];
  const int len = 1 + int(rng() % 20);
  job.prompt = {1};
  for (int t = 1; t < len; ++t) job.prompt.push_back(int32_t(3 + rng() % 90));
  job.num_samples = 1 + int32_t(i % 3);
  job.params.max_tokens = 4 + int32_t(rng() % 24);
  job.params.seed = uint64_t(1000 + i);
  switch (i % 4) {
    case 0: job.params.temperature = 0.0f; break;                 // greedy
    case 1: job.params.temperature = 1.0f; break;                 // seeded sampling
    case 2: job.params.temperature = 0.7f; job.params.top_k = 8; break;
    case 3: job.params.temperature = 1.2f; job.params.top_p = 0.8f; break;
  }
  if (i % 5 == 0) job.params.stop_token_ids = {int32_t(3 + rng() % 90), 2};
  return job;
}

TEST(SchedulerSampling, ConcurrentMixEqualsGeneratorAlone) {
  auto env = testing::tiny_env();
  env->add_adapter("a", 8, 1);
  env->add_adapter("b", 2, 2, /*warm=*/true);
  env->add_adapter("c", 4, 3);
  const std::vector<std::string> keys = {"a", "", "b", "c"};
  // A small budget forces chunked prefill and many admissions into running batches.
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency,
                  {.token_budget = 24, .max_running = 16, .kv_blocks = 128});
  constexpr int kThreads = 4, kPerThread = 8;
  std::vector<SampleJob> jobs;
  std::mt19937 rng(7);
  for (int i = 0; i < kThreads * kPerThread; ++i) jobs.push_back(make_job(rng, i, keys));
  std::vector<SampleWaiter> waiters(jobs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPerThread; ++k) {
        const size_t i = size_t(t * kPerThread + k);
        SampleJob job = jobs[i];
        job.done = waiters[i].callback();
        EXPECT_TRUE(sched.submit_sample(std::move(job)));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto out = waiters[i].get();
    ASSERT_TRUE(out.ok()) << "job " << i << ": " << out.error.message;
    testing::expect_same(*out.value, env->alone(jobs[i]), "job " + std::to_string(i));
  }
  sched.stop();
  const SchedulerStats s = sched.stats();
  EXPECT_EQ(s.jobs_done, jobs.size());
  EXPECT_EQ(s.jobs_failed, 0u);
  EXPECT_EQ(s.running_sequences, 0u);
  EXPECT_GT(s.engine_steps, 0u);
  // Fewer steps than running every job alone would take: requests shared forward passes.
  uint64_t alone_steps = 0;
  for (const auto& j : jobs) alone_steps += uint64_t(j.params.max_tokens);
  EXPECT_LT(s.engine_steps, alone_steps);
  EXPECT_EQ(s.device_slots, 4);
}

TEST(SchedulerSampling, TightKvCacheDelaysAdmissionButNeverFailsARunningSequence) {
  auto env = testing::tiny_env();
  env->add_adapter("a", 4, 5, true);
  // 10 blocks of 16 tokens: one 3-sample request of up to 40 tokens needs up to 9.
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency,
                  {.token_budget = 64, .kv_blocks = 10});
  std::vector<SampleJob> jobs;
  std::vector<SampleWaiter> waiters(8);
  for (int i = 0; i < 8; ++i) {
    SampleJob job;
    job.adapter_key = i % 2 ? "a" : "";
    job.prompt = {1, int32_t(10 + i), 20, 30, int32_t(40 + i)};
    job.num_samples = 3;
    job.params.seed = uint64_t(i);
    job.params.max_tokens = 35;
    jobs.push_back(job);
    job.done = waiters[size_t(i)].callback();
    ASSERT_TRUE(sched.submit_sample(std::move(job)));
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto out = waiters[i].get();
    ASSERT_TRUE(out.ok()) << out.error.message;
    testing::expect_same(*out.value, env->alone(jobs[i]), "job " + std::to_string(i));
  }
  // A job that can never fit is refused with `resource`, not left waiting.
  SampleWaiter too_big;
  SampleJob big = jobs[0];
  big.num_samples = 20;
  big.done = too_big.callback();
  ASSERT_TRUE(sched.submit_sample(std::move(big)));
  auto out = too_big.get();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error.code, ErrorCode::resource);
}

TEST(SchedulerSampling, ComputeLogprobsMatchesReferenceAndSampledLogprobs) {
  auto env = testing::tiny_env();
  const engine::LoraWeights& adapter = env->add_adapter("a", 4, 9, true);
  // Budget 7: a 40-token scoring job runs in chunks across several steps.
  Scheduler sched(*env->backend, nullptr, env->pool, env->residency, {.token_budget = 7});
  SampleJob sample;
  sample.adapter_key = "a";
  sample.prompt = {1, 17, 23, 5};
  sample.params.max_tokens = 36;
  sample.params.seed = 3;
  SampleWaiter sw;
  sample.done = sw.callback();
  ASSERT_TRUE(sched.submit_sample(sample));
  auto sampled = sw.get();
  ASSERT_TRUE(sampled.ok());
  const engine::Completion& c = sampled.value->at(0);

  LogprobsJob job;
  job.adapter_key = "a";
  job.tokens = sample.prompt;
  job.tokens.insert(job.tokens.end(), c.tokens.begin(), c.tokens.end());
  testing::Waiter<std::vector<float>> lw;
  job.done = lw.callback();
  LogprobsJob base = job;
  base.adapter_key.clear();
  testing::Waiter<std::vector<float>> bw;
  base.done = bw.callback();
  ASSERT_TRUE(sched.submit_logprobs(job));
  ASSERT_TRUE(sched.submit_logprobs(base));
  auto lp = lw.get();
  auto blp = bw.get();
  ASSERT_TRUE(lp.ok()) << lp.error.message;
  ASSERT_TRUE(blp.ok()) << blp.error.message;
  ASSERT_EQ(lp.value->size(), job.tokens.size());
  EXPECT_TRUE(std::isnan((*lp.value)[0]));
  EXPECT_TRUE(std::isnan((*blp.value)[0]));

  spindle::testing::ReferenceModel ref(env->weights, &adapter);
  spindle::testing::ReferenceModel ref_base(env->weights, nullptr);
  for (size_t i = 0; i + 1 < job.tokens.size(); ++i) {
    for (auto [model, got] : {std::pair{&ref, &*lp.value}, std::pair{&ref_base, &*blp.value}}) {
      const auto logits = model->step(job.tokens[i]);
      double m = logits[0], z = 0;
      for (double l : logits) m = std::max(m, l);
      for (double l : logits) z += std::exp(l - m);
      const double want = logits[size_t(job.tokens[i + 1])] - m - std::log(z);
      EXPECT_NEAR((*got)[i + 1], want, 2e-3) << "position " << i + 1;
    }
  }
  // The completion's tokens score exactly as the sampler reported them.
  for (size_t t = 0; t < c.tokens.size(); ++t)
    EXPECT_NEAR((*lp.value)[sample.prompt.size() + t], c.logprobs[t], 1e-4f);
}

TEST(SchedulerSampling, Stories260KWithTokenizerAndStopsEqualsGeneratorAlone) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  SPINDLE_SHARED_OR_SKIP(tok_path, "models/stories260K/tok512.bin");
  Env env(engine::load_llama2c(bin), {.serving_slots = 2, .max_rank = 8});
  const auto tok = engine::load_tokenizer(tok_path);
  env.add_adapter("story-a", 8, 11);
  Scheduler sched(*env.backend, tok.get(), env.pool, env.residency, {.token_budget = 48});
  const char* prompts[] = {"Once upon a time", "Lily had a red ball", "The cat", "One day"};
  std::vector<SampleJob> jobs;
  for (int i = 0; i < 8; ++i) {
    SampleJob job;
    job.tenant = i % 2 ? "x" : "y";
    job.adapter_key = i % 3 == 1 ? "story-a" : "";
    job.prompt = tok->encode(prompts[i % 4]);
    job.num_samples = i % 2 ? 3 : 1;
    job.params.max_tokens = 60;
    job.params.temperature = i < 4 ? 0.0f : 0.8f;
    job.params.seed = uint64_t(i);
    job.params.stop_token_ids = {1};
    if (i % 4 == 0) job.params.stop_strings = {"Lily", "."};
    jobs.push_back(job);
  }
  std::vector<SampleWaiter> waiters(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    SampleJob job = jobs[i];
    job.done = waiters[i].callback();
    ASSERT_TRUE(sched.submit_sample(std::move(job)));
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto out = waiters[i].get();
    ASSERT_TRUE(out.ok()) << out.error.message;
    testing::expect_same(*out.value, env.alone(jobs[i], tok.get()), "job " + std::to_string(i));
    for (const auto& c : *out.value) EXPECT_FALSE(c.text.empty()) << "job " << i;
  }
}

}  // namespace
}  // namespace spindle::scheduler
