// GRPO demonstrations (CPU, fixed seeds, bounded steps) on real models, real reward plugins in
// a real spindle-reward-host, a real catalog:
//  - stories260K learns to mention "cat" (keywords reward);
//  - the arithmetic base (a small make-base built once per binary) gains held-out exact match;
//  - four policies with different rewards train concurrently, each improving on its own reward,
//    with their training passes merged by the scheduler;
//  - a run stopped and resumed from its saved revision continues exactly.

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "device_under_test.h"
#include "shared_fixtures.h"
#include "spindle/catalog/catalog.h"
#include "spindle/rl/grpo_run.h"
#include "spindle/rl/local_engine.h"

namespace spindle::rl {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("spindle-grpo-{}-{}", name, getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

RunContext context(LocalEngine& engine, const fs::path& catalog_dir, const std::string& base_id) {
  RunContext ctx;
  ctx.scheduler = &engine.scheduler();
  ctx.model_config = engine.weights().config;
  ctx.tokenizer = &engine.tokenizer();
  ctx.catalog_dir = catalog_dir;
  ctx.base_id = base_id;
  if (!catalog_dir.empty()) {
    catalog::Catalog cat(catalog_dir);
    cat.register_base({.id = base_id, .arch = "llama", .path = "", .checksum = ""}, "test");
  }
  return ctx;
}

PolicyConfig keyword_policy(const std::string& name, const std::string& word) {
  PolicyConfig p;
  p.name = name;
  p.rank = 8;
  p.alpha = 16.0f;
  p.learning_rate = 1e-2f;
  p.loss = engine::LossFn::ppo;
  p.loss_config.clip_high_threshold = 1.28f;
  p.dataset.name = "inline";
  p.dataset.prompts = {"Once upon a time", "One day", "There was a", "Lily saw", "Tom went",
                       "The little girl"};
  p.reward.terms.push_back(
      {word, "keywords", 1.0, fmt::format(R"({{"present": ["{}"]}})", word)});
  return p;
}

RunConfig stories_config(int64_t steps) {
  RunConfig c;
  c.seed = 3;
  c.steps = steps;
  c.group_size = 8;
  c.prompts_per_step = 6;
  c.max_tokens = 32;
  c.eval_every = 0;
  c.save_every = 0;
  c.eval_prompts = 0;
  return c;
}

// Mean of `field` over steps [from, to] of one policy.
double mean_reward(const std::vector<StepMetrics>& h, const std::string& policy, int64_t from,
                   int64_t to) {
  double s = 0;
  int n = 0;
  for (const auto& m : h) {
    if (m.policy == policy && m.trained && m.step >= from && m.step <= to) {
      s += m.reward_mean;
      ++n;
    }
  }
  return n ? s / n : 0.0;
}

// The stories runs go on the device under test (device_under_test.h; the "cuda." instance runs
// them on a GPU in bf16, the base's default dtype there).
TEST(Grpo, StoriesLearnToMentionACat) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  LocalEngine engine(model, {.device = spindle::testing::test_device()});
  RunConfig c = stories_config(24);
  c.policies.push_back(keyword_policy("cat", "cat"));
  GrpoRun run(c, context(engine, "", ""));
  run.run();
  const auto h = run.history();
  const double first = mean_reward(h, "cat", 1, 4), last = mean_reward(h, "cat", 21, 24);
  std::printf("cat reward: steps 1-4 %.3f, steps 21-24 %.3f\n", first, last);
  EXPECT_GT(last, first + 0.3);
  EXPECT_EQ(run.status().state, RunState::finished);
}

TEST(Grpo, FourConcurrentPoliciesEachLearnTheirOwnReward) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  LocalEngine engine(model, {.device = spindle::testing::test_device()});
  RunConfig c = stories_config(20);
  const std::vector<std::string> words = {"cat", "dog", "ball", "tree"};
  for (const auto& w : words) c.policies.push_back(keyword_policy("likes-" + w, w));
  GrpoRun run(c, context(engine, "", ""));
  run.run();
  const auto h = run.history();
  for (const auto& w : words) {
    const double first = mean_reward(h, "likes-" + w, 1, 4);
    const double last = mean_reward(h, "likes-" + w, 17, 20);
    std::printf("%s reward: steps 1-4 %.3f, steps 17-20 %.3f\n", w.c_str(), first, last);
    EXPECT_GT(last, first + 0.2) << w;
  }
  const scheduler::SchedulerStats s = engine.scheduler().stats();
  std::printf("train passes %llu, jobs merged %llu\n", (unsigned long long)s.train_passes,
              (unsigned long long)s.train_jobs_merged);
  // forward_backward jobs run: one per policy and step with a group left after dropping the
  // uniform ones. Submitted together, they share passes.
  uint64_t fb_jobs = 0;
  for (const auto& m : h) fb_jobs += m.trained && m.dropped_groups < c.prompts_per_step ? 1 : 0;
  std::printf("forward_backward jobs %llu\n", (unsigned long long)fb_jobs);
  // Most jobs ran merged with another policy's, and there were fewer passes than jobs. (A merged
  // group is still split into passes of at most train_tokens_per_pass tokens, so the pass count
  // also depends on the sampled lengths: a CI run saw 14 passes for 29 jobs, 22 of them merged.)
  EXPECT_GE(s.train_jobs_merged, fb_jobs / 2);
  EXPECT_LT(s.train_passes, fb_jobs);
}

TEST(Grpo, StoppedRunResumesFromItsRevisionExactly) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = temp_dir("resume");
  LocalEngine engine(model);
  RunConfig c = stories_config(4);
  c.save_every = 2;
  c.policies.push_back(keyword_policy("whole", "cat"));
  GrpoRun whole(c, context(engine, dir, "stories"));
  whole.run();

  RunConfig half = c;
  half.policies[0].name = "halves";
  half.steps = 2;
  {
    GrpoRun first(half, context(engine, dir, "stories"));
    first.run();
  }
  half.steps = 4;
  GrpoRun rest(half, context(engine, dir, "stories"), {.resume = true});
  EXPECT_THROW(GrpoRun(half, context(engine, dir, "stories")).run(), Error);  // no resume
  rest.run();
  // Batched float results depend on which rows share an engine step, so sampled tokens (and
  // the weights after them) are not bit-reproducible across runs; what resume guarantees is
  // the continuation: steps 3..4 only, from the saved weights and optimizer state.
  const auto hr = rest.history();
  int64_t optimizer_steps = 0;
  for (const auto& m : hr) {
    EXPECT_GE(m.step, 3) << "a resumed run repeats no step";
    optimizer_steps += m.dropped_groups < c.prompts_per_step ? 1 : 0;
  }
  EXPECT_EQ(hr.size(), 2u);
  catalog::Catalog cat(dir);
  const catalog::Address head{"local", "halves", ""};
  EXPECT_EQ(cat.get("local", head).revision.step, 4);
  const auto lineage = cat.lineage("local", head);
  ASSERT_FALSE(lineage.ancestors.empty());  // step 4's parent is the run's step-2 revision
  const auto saved2 = cat.read_optimizer_state(
      "local", {"local", "halves", lineage.ancestors.front().revision.id});
  const auto final_state = cat.read_optimizer_state("local", head);
  ASSERT_TRUE(saved2 && final_state);
  EXPECT_EQ(final_state->step_count(), saved2->step_count() + optimizer_steps);
  EXPECT_GT(saved2->step_count(), 0);
  fs::remove_all(dir);
}

// The arithmetic base, built once per binary with the README main job's recipe and target (stop
// at 50% on training problems), but on a step budget (--steps) instead of make-base's default
// 5 wall-clock minutes: with one OpenMP thread the base is then the same on every run whatever
// the machine's load (here: 4050 steps, 0.505 held-out, 5.8 min), where the minutes budget gave
// bases of 0.47-0.58 and GRPO gains of +0.04 to +0.16. Stopping on the target keeps the base
// mid-training, where GRPO gains most; a lower target (0.2) gave bases that sometimes did not
// improve at all. --minutes 30 is only a cap.
fs::path arith_base() {
  static const fs::path dir = [] {
    const fs::path d = temp_dir("arith-base");
    const std::string cmd = fmt::format(
        "OMP_NUM_THREADS=1 {} make-base --task arithmetic --out {} --steps 6000 --minutes 30 "
        "--target-accuracy 0.5 > {} 2>&1",
        SPINDLE_CLI, (d / "base").string(), (d / "make-base.log").string());
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd;
    return d / "base";
  }();
  return dir;
}

TEST(Grpo, ArithmeticHeldOutAccuracyRises) {
  const fs::path base = arith_base();
  ASSERT_TRUE(fs::exists(base / "config.json"));
  LocalEngine engine(base);
  RunConfig c = default_arith_config();  // the README's demo, unchanged but for evaluations
  c.eval_every = 10;
  c.eval_prompts = 200;
  ASSERT_EQ(c.steps, 60);
  GrpoRun run(c, context(engine, "", ""));
  run.run();
  const auto h = run.history();
  ASSERT_TRUE(h.front().eval_accuracy);
  const double before = *h.front().eval_accuracy;
  // Greedy exact match on 200 problems moves by ±0.04 between neighbouring checkpoints, so the
  // gain is judged on the mean of the last three (steps 40, 50, 60).
  double after = 0.0;
  int n = 0;
  for (const auto& m : h) {
    if (m.step >= 40 && m.eval_accuracy) {
      after += *m.eval_accuracy;
      ++n;
    }
  }
  ASSERT_EQ(n, 3);
  after /= n;
  std::printf("arith held-out exact match: %.3f -> %.3f (mean of steps 40-60), last %.3f\n",
              before, after, *h.back().eval_accuracy);
  // The base is fixed (arith_base: a step budget, one thread): held-out 0.505 -> 0.678 (mean of
  // steps 40-60) on 2026-12-02. The bound leaves room for the GRPO run's own float-order
  // differences across thread counts; on wall-clock bases the gain ranged +0.03 to +0.17.
  EXPECT_GT(after, before + 0.10);
}

}  // namespace
}  // namespace spindle::rl
