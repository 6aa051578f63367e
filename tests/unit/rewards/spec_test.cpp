// RewardSpec parsing (errors name the field), weights, summary statistics, JSONL rows.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "spindle/core/error.h"
#include "spindle/rewards/rewards.h"
#include "spindle/rewards/summary.h"

namespace spindle::rewards {
namespace {

std::string parse_error(const std::string& text) {
  try {
    RewardSpec::parse(text, "spec.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
  ADD_FAILURE() << "no error for " << text;
  return "";
}

TEST(RewardSpec, ParsesTermsWithDefaults) {
  RewardSpec s = RewardSpec::parse(
      R"({"terms": [{"plugin": "numeric_match"},
                    {"name": "fmt", "plugin": "regex", "weight": 0.25,
                     "config": {"pattern": "####"}}]})",
      "spec.json");
  ASSERT_EQ(s.terms.size(), 2u);
  EXPECT_EQ(s.terms[0].name, "numeric_match");
  EXPECT_EQ(s.terms[0].weight, 1.0);
  EXPECT_EQ(s.terms[0].config_json, "{}");
  EXPECT_EQ(s.terms[1].name, "fmt");
  EXPECT_EQ(s.terms[1].weight, 0.25);
  EXPECT_EQ(nlohmann::json::parse(s.terms[1].config_json), nlohmann::json({{"pattern", "####"}}));
  // to_json round-trips.
  RewardSpec again = RewardSpec::parse(s.to_json(), "round trip");
  ASSERT_EQ(again.terms.size(), 2u);
  EXPECT_EQ(again.terms[1].name, "fmt");
  EXPECT_EQ(again.terms[1].weight, 0.25);
  EXPECT_EQ(again.terms[1].config_json, s.terms[1].config_json);
}

TEST(RewardSpec, ErrorsNameTheField) {
  EXPECT_NE(parse_error("{").find("spec.json"), std::string::npos);
  EXPECT_NE(parse_error(R"({"terms": []})").find("'terms'"), std::string::npos);
  EXPECT_NE(parse_error(R"({"term": []})").find("'term'"), std::string::npos);
  EXPECT_NE(parse_error(R"({"terms": [{"plugin": "regex", "weight": "1"}]})")
                .find("terms[0].weight"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"terms": [{"name": "x"}]})").find("terms[0].plugin"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"terms": [{"plugin": "regex", "config": [1]}]})")
                .find("terms[0].config"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"terms": [{"plugin": "a"}, {"plugin": "a"}]})").find("terms[1].name"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"terms": [{"plugin": "a", "wieght": 2}]})").find("'wieght'"),
            std::string::npos);
}

TEST(RewardSummary, DescribeMatchesHandComputedStatistics) {
  const std::vector<double> v = {0, 0, 1, 1, 1, 0.5};
  Distribution d = describe(v, 2);
  EXPECT_EQ(d.n, 6u);
  EXPECT_DOUBLE_EQ(d.mean, 3.5 / 6);
  double var = 0;
  for (double x : v) var += (x - 3.5 / 6) * (x - 3.5 / 6);
  EXPECT_DOUBLE_EQ(d.std, std::sqrt(var / 6));
  EXPECT_EQ(d.min, 0);
  EXPECT_EQ(d.max, 1);
  EXPECT_EQ(d.histogram, (std::vector<size_t>{2, 4}));  // [0, .5) and [.5, 1]
  const std::vector<double> same = {2, 2};
  EXPECT_EQ(describe(same, 3).histogram, (std::vector<size_t>{2, 0, 0}));
}

TEST(RewardSummary, JsonlRowsSplitIntoFields) {
  RewardItem it = reward_item_from_jsonl(
      R"({"prompt": "p", "completion": "c", "answer": "#### 3", "input": "1,2", "output": "3"})",
      "completion", "d.jsonl:1");
  EXPECT_EQ(it.prompt, "p");
  EXPECT_EQ(it.completion, "c");
  EXPECT_EQ(it.reference, "#### 3");
  EXPECT_EQ(nlohmann::json::parse(it.metadata_json),
            nlohmann::json({{"input", "1,2"}, {"output", "3"}}));
  try {
    reward_item_from_jsonl(R"({"text": "x"})", "completion", "d.jsonl:7");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d.jsonl:7"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'completion'"), std::string::npos);
  }
}

}  // namespace
}  // namespace spindle::rewards
