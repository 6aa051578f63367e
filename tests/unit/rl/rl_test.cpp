// backend/rl pieces without an engine: config validation (field paths), group advantages and
// the k3 KL penalty against hand-computed values, datasets (templates, deterministic splits,
// the shared gsm8k/countdown files) and the resumable data order.

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "shared_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/rl/advantages.h"
#include "spindle/rl/config.h"
#include "spindle/rl/datasets.h"

namespace spindle::rl {
namespace {

const char* kMinimal = R"({"steps": 5, "policies": [{"name": "p", "learning_rate": 0.001,
  "reward": {"terms": [{"name": "correct", "plugin": "numeric_match"}]}}]})";

std::string error_of(const std::string& text) {
  try {
    parse_run_config(text, "run.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
  return "";
}

TEST(RlConfig, ParsesAndRoundTrips) {
  const RunConfig c = parse_run_config(kMinimal, "run.json");
  ASSERT_EQ(c.policies.size(), 1u);
  EXPECT_EQ(c.steps, 5);
  EXPECT_EQ(c.policies[0].loss, engine::LossFn::ppo);
  EXPECT_EQ(c.policies[0].dataset.name, "arith");
  const RunConfig again = parse_run_config(c.to_json(), "again");
  EXPECT_EQ(again.to_json(), c.to_json());
  const RunConfig d = default_arith_config();
  EXPECT_NO_THROW(validate_run_config(d));
  EXPECT_EQ(parse_run_config(d.to_json(), "default").to_json(), d.to_json());
}

TEST(RlConfig, ErrorsNameTheFieldPath) {
  EXPECT_NE(error_of(R"({"policies": []})").find("policies"), std::string::npos);
  EXPECT_NE(error_of(R"({"stepz": 1, "policies": []})").find("config.stepz: unknown field"),
            std::string::npos);
  const std::string lr = error_of(R"({"policies": [{"name": "a", "learning_rate": 0.1,
    "reward": {"terms": [{"name": "x", "plugin": "length"}]}}, {"name": "b",
    "learning_rate": -1, "reward": {"terms": [{"name": "x", "plugin": "length"}]}}]})");
  EXPECT_NE(lr.find("policies[1].learning_rate: must be > 0"), std::string::npos) << lr;
  const std::string loss = error_of(R"({"policies": [{"name": "a", "loss": "cross_entropy",
    "reward": {"terms": [{"name": "x", "plugin": "length"}]}}]})");
  EXPECT_NE(loss.find("policies[0].loss"), std::string::npos) << loss;
  const std::string clip = error_of(R"({"policies": [{"name": "a", "loss_config":
    {"clip_low_threshold": 1.5}, "reward": {"terms": [{"name": "x", "plugin": "length"}]}}]})");
  EXPECT_NE(clip.find("policies[0].loss_config"), std::string::npos) << clip;
  const std::string term = error_of(R"({"policies": [{"name": "a", "eval_metric_term": "nope",
    "reward": {"terms": [{"name": "x", "plugin": "length"}]}}]})");
  EXPECT_NE(term.find("policies[0].eval_metric_term"), std::string::npos) << term;
  const std::string dup = error_of(R"({"policies": [{"name": "a", "reward": {"terms": [{"name":
    "x", "plugin": "length"}]}}, {"name": "a", "reward": {"terms": [{"name": "x",
    "plugin": "length"}]}}]})");
  EXPECT_NE(dup.find("policies[1].name"), std::string::npos) << dup;
  EXPECT_NE(error_of(R"({"group_size": 1, "policies": []})").find("group_size"),
            std::string::npos);
  const std::string ds = error_of(R"({"policies": [{"name": "a", "dataset": {"name": "jsonl"},
    "reward": {"terms": [{"name": "x", "plugin": "length"}]}}]})");
  EXPECT_NE(ds.find("policies[0].dataset.path"), std::string::npos) << ds;
}

TEST(RlAdvantages, GrpoDrGrpoAndDropping) {
  const std::vector<double> r = {1, 0, 0, 1, /*uniform*/ 1, 1, 1, 1};
  const GroupAdvantages g = group_advantages(r, 4, AdvantageMode::grpo, true);
  // mean 0.5, population std 0.5: ±1.
  EXPECT_NEAR(g.advantages[0], 1.0f, 1e-5f);
  EXPECT_NEAR(g.advantages[1], -1.0f, 1e-5f);
  EXPECT_EQ(g.dropped_groups, 1);
  EXPECT_TRUE(g.keep[0]);
  EXPECT_FALSE(g.keep[4]);
  const GroupAdvantages d = group_advantages(r, 4, AdvantageMode::dr_grpo, false);
  EXPECT_NEAR(d.advantages[0], 0.5f, 1e-6f);
  EXPECT_NEAR(d.advantages[1], -0.5f, 1e-6f);
  EXPECT_EQ(d.dropped_groups, 0);
  EXPECT_TRUE(d.keep[4]);
  EXPECT_EQ(d.advantages[4], 0.0f);
  const std::vector<double> three = {0.2, 0.5, 1.1};
  const GroupAdvantages t = group_advantages(three, 3, AdvantageMode::grpo, true);
  const double mean = 0.6, sd = std::sqrt((0.16 + 0.01 + 0.25) / 3.0);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(t.advantages[i], (three[i] - mean) / sd, 1e-4);
  EXPECT_THROW(group_advantages(three, 2, AdvantageMode::grpo, true), Error);
}

TEST(RlAdvantages, K3KlPenaltyFoldsIntoTokenAdvantages) {
  EXPECT_EQ(kl_k3(-1.0f, -1.0f), 0.0f);
  // δ = base − policy = 0.5: e^0.5 − 0.5 − 1.
  EXPECT_NEAR(kl_k3(-2.0f, -1.5f), std::exp(0.5) - 1.5, 1e-6);
  EXPECT_GT(kl_k3(-1.0f, -3.0f), 0.0f);
  const std::vector<float> policy = {-1.0f, -2.0f}, base = {-1.0f, -1.5f};
  std::vector<float> adv(2);
  const double sum = apply_kl_penalty(0.7f, 0.1f, policy, base, adv);
  EXPECT_FLOAT_EQ(adv[0], 0.7f);
  EXPECT_NEAR(adv[1], 0.7 - 0.1 * (std::exp(0.5) - 1.5), 1e-6);
  EXPECT_NEAR(sum, std::exp(0.5) - 1.5, 1e-6);
}

TEST(RlDatasets, TemplatesSplitsAndDataOrder) {
  EXPECT_EQ(fill_template("Q: {question}\nA:", R"({"question": "2+2?", "n": 3})", "x"),
            "Q: 2+2?\nA:");
  EXPECT_EQ(fill_template("{n} items", R"({"n": 3})", "x"), "3 items");
  EXPECT_THROW(fill_template("{missing}", R"({"n": 3})", "x"), Error);

  const Dataset arith = load_dataset({.name = "arith"}, "", 0);
  EXPECT_EQ(arith.heldout.size(), 200u);
  EXPECT_EQ(arith.heldout[0].prompt.back(), '=');

  // data_index: each epoch is a permutation, and the order is a function of (seed, i).
  std::set<size_t> epoch;
  for (uint64_t i = 0; i < 10; ++i) epoch.insert(data_index(5, i, 10));
  EXPECT_EQ(epoch.size(), 10u);
  EXPECT_EQ(data_index(5, 13, 10), data_index(5, 13, 10));
  int differ = 0;
  for (uint64_t i = 0; i < 10; ++i) differ += data_index(5, i, 10) != data_index(6, i, 10);
  EXPECT_GT(differ, 0);
}

TEST(RlDatasets, SharedGsm8kAndCountdownLoadByName) {
  SPINDLE_SHARED_OR_SKIP(data, "data");
  const Dataset g = load_dataset({.name = "gsm8k"}, data, 3);
  EXPECT_EQ(g.heldout.size(), 200u);
  EXPECT_EQ(g.train.size() + g.heldout.size(), 7473u);
  EXPECT_EQ(g.train[0].prompt.rfind("Question: ", 0), 0u);
  EXPECT_NE(g.train[0].reference.find("####"), std::string::npos);
  const Dataset again = load_dataset({.name = "gsm8k"}, data, 3);
  EXPECT_EQ(again.heldout[17].prompt, g.heldout[17].prompt);  // split is deterministic
  const Dataset other = load_dataset({.name = "gsm8k"}, data, 4);
  EXPECT_NE(other.heldout[0].prompt + other.heldout[1].prompt,
            g.heldout[0].prompt + g.heldout[1].prompt);
  const Dataset c = load_dataset({.name = "countdown"}, data, 0);
  EXPECT_EQ(c.train.size() + c.heldout.size(), 256u);
  EXPECT_NE(c.train[0].metadata_json.find("\"input\""), std::string::npos);
  EXPECT_FALSE(c.train[0].reference.empty());
  EXPECT_THROW(load_dataset({.name = "jsonl", .path = "nope.jsonl", .prompt_template = "{x}"},
                            data, 0),
               Error);
}

}  // namespace
}  // namespace spindle::rl
