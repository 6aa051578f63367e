// Plugins that misbehave (crash, hang, NaN, wrong ABI), unknown plugins and bad configs: each
// fails that call with a typed error, the host is restarted, the next call succeeds.

#include <gtest/gtest.h>

#include <functional>

#include "reward_test_util.h"
#include "spindle/core/error.h"

namespace spindle::rewards {
namespace {

using testing::host_options;
using testing::item;
using testing::one_term;

// Runs f, expects a spindle::Error with `code`; returns its message.
std::string error_of(const std::function<void()>& f, ErrorCode code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << error_code_name(e.code()) << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::vector<RewardItem> kItems = {item("#### 1", "1"), item("#### 2", "3"),
                                        item("#### 4", "4")};

void expect_good_call(RewardScorer& scorer) {
  RewardBatch b = scorer.score(one_term("numeric_match"), kItems);
  EXPECT_EQ(b.total, (std::vector<double>{1, 0, 1}));
}

TEST(RewardHost, CrashingPluginFailsThatCallOnly) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  expect_good_call(scorer);
  const std::string msg =
      error_of([&] { scorer.score(one_term("crash"), kItems); }, ErrorCode::internal);
  EXPECT_TRUE(has(msg, "plugin crash")) << msg;
  EXPECT_TRUE(has(msg, "signal")) << msg;
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 1u);
}

TEST(RewardHost, HangingPluginTimesOutAndHostRestarts) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true, std::chrono::milliseconds(300)));
  expect_good_call(scorer);
  const std::string msg =
      error_of([&] { scorer.score(one_term("hang"), kItems); }, ErrorCode::resource);
  EXPECT_TRUE(has(msg, "plugin hang")) << msg;
  EXPECT_TRUE(has(msg, "300 ms")) << msg;
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 1u);
}

TEST(RewardHost, NonFiniteScoreNamesTheItem) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  const std::string msg =
      error_of([&] { scorer.score(one_term("nan"), kItems); }, ErrorCode::internal);
  EXPECT_TRUE(has(msg, "plugin nan")) << msg;
  EXPECT_TRUE(has(msg, "item 1")) << msg;
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 0u);  // the host survived: nothing to restart
}

TEST(RewardHost, AbiMismatchNamesFileAndBothVersions) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  const std::string msg =
      error_of([&] { scorer.validate(one_term("bad_abi")); }, ErrorCode::unsupported);
  EXPECT_TRUE(has(msg, "spindle_reward_bad_abi.so")) << msg;
  EXPECT_TRUE(has(msg, "version 999")) << msg;
  EXPECT_TRUE(has(msg, "version 1 ")) << msg;
  // The refused file is not listed; the good ones are.
  for (const PluginInfo& p : scorer.plugins()) EXPECT_NE(p.name, "bad_abi");
  expect_good_call(scorer);
}

// A plugin built before reward.h appended `version` (smaller struct_size) still loads; its
// version is "".
TEST(RewardHost, TableWithoutVersionLoads) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  bool listed = false;
  for (const PluginInfo& p : scorer.plugins()) {
    if (p.name != "v1_table") continue;
    listed = true;
    EXPECT_EQ(p.version, "");
    EXPECT_EQ(p.abi_version, 1u);
  }
  EXPECT_TRUE(listed);
  const RewardBatch b = scorer.score(one_term("v1_table"), kItems);
  for (double s : b.per_term[0]) EXPECT_EQ(s, 1.0);
}

TEST(RewardHost, UnknownPluginIsNotFound) {
  RewardScorer scorer(host_options());
  const std::string msg =
      error_of([&] { scorer.score(one_term("no_such_reward"), kItems); }, ErrorCode::not_found);
  EXPECT_TRUE(has(msg, "no_such_reward")) << msg;
  EXPECT_TRUE(has(msg, "numeric_match")) << msg;  // lists what exists
}

TEST(RewardHost, BadConfigNamesTermAndField) {
  RewardScorer scorer(host_options());
  RewardSpec spec = RewardSpec::parse(
      R"({"terms": [{"name": "acc", "plugin": "numeric_match"},
                    {"name": "story", "plugin": "keywords", "config": {"present": "dog"}}]})",
      "spec");
  std::string msg = error_of([&] { scorer.validate(spec); }, ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "term 'story'")) << msg;
  EXPECT_TRUE(has(msg, "config.present")) << msg;
  // Unknown field (schema: additionalProperties false).
  msg = error_of([&] { scorer.validate(one_term("length", R"({"target": 3, "unit_": "x"})")); },
                 ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "config.unit_")) << msg;
  // Enum and required (schema).
  msg = error_of([&] { scorer.validate(one_term("length", R"({"target": 3, "unit": "words"})")); },
                 ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "config.unit")) << msg;
  msg = error_of([&] { scorer.validate(one_term("regex")); }, ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "config.pattern")) << msg;
  // Errors only create() can see: a pattern that does not compile, an empty keyword list.
  msg = error_of([&] { scorer.validate(one_term("regex", R"({"pattern": "(unclosed"})")); },
                 ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "regex: config.pattern")) << msg;
  msg = error_of([&] { scorer.score(one_term("keywords"), kItems); }, ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "keywords")) << msg;
  // The plugin's own message when schema passes but create() refuses a value.
  msg = error_of([&] { scorer.validate(one_term("keywords", R"({"present": ["a", ""]})")); },
                 ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "empty")) << msg;
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 0u);
}

TEST(RewardHost, EmptyBatchNeedsNoHost) {
  RewardScorer scorer(host_options());
  RewardBatch b = scorer.score(one_term("numeric_match"), {});
  EXPECT_TRUE(b.total.empty());
  ASSERT_EQ(b.per_term.size(), 1u);
}

}  // namespace
}  // namespace spindle::rewards
