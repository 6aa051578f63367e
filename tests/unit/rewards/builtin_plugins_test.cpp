// The built-in plugins, loaded with dlopen by a real spindle-reward-host, on real data.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <optional>

#include "reward_test_util.h"
#include "shared_fixtures.h"
#include "spindle/core/error.h"

namespace spindle::rewards {
namespace {

using testing::host_options;
using testing::item;
using testing::one_term;

std::vector<double> scores_of(RewardScorer& s, const RewardSpec& spec,
                              const std::vector<RewardItem>& items) {
  RewardBatch b = s.score(spec, items);
  EXPECT_EQ(b.per_term.size(), spec.terms.size());
  return b.per_term.at(0);
}

TEST(NumericMatch, Gsm8kAnswersScoredAgainstThemselves) {
  SPINDLE_SHARED_OR_SKIP(path, "data/gsm8k/test.jsonl");
  std::vector<RewardItem> items;
  for (const std::string& line : testing::read_lines(path.string(), 100)) {
    const auto row = nlohmann::json::parse(line);
    items.push_back(item(row["answer"], row["answer"]));
  }
  ASSERT_EQ(items.size(), 100u);
  RewardScorer scorer(host_options());
  const std::vector<double> s = scores_of(scorer, one_term("numeric_match"), items);
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i], 1.0) << "row " << i;

  // Every completion paired with the next row's reference: equal final answers only.
  std::vector<RewardItem> shifted;
  std::vector<double> expected;
  auto final_answer = [](const std::string& a) {
    std::string t = a.substr(a.rfind("####") + 4);
    t.erase(std::remove_if(t.begin(), t.end(), [](char c) { return c == ',' || c == ' '; }),
            t.end());
    return std::stod(t);
  };
  for (size_t i = 0; i + 1 < items.size(); ++i) {
    shifted.push_back(item(items[i].completion, items[i + 1].reference));
    expected.push_back(final_answer(items[i].completion) == final_answer(items[i + 1].reference));
  }
  EXPECT_EQ(scores_of(scorer, one_term("numeric_match"), shifted), expected);
}

TEST(NumericMatch, NormalisesCommasAndTrailingZeros) {
  RewardScorer scorer(host_options());
  const std::vector<RewardItem> items = {
      item("so she pays 1000 + 234 = 1234.\n#### 1,234.0", "1234"),      // 1
      item("#### 1,234.0", "She pays ...\n#### 1234"),                     // 1
      item("the total is $1,234", "1234"),                                 // 1, last number
      item("#### 1235", "1234"),                                           // 0 wrong
      item("no digits here", "1234"),                                      // 0 none
      item("#### -7", "-7"),                                               // 1 negative
      item("16-3-4 = 9 eggs", "9"),                                        // 1 last number
  };
  EXPECT_EQ(scores_of(scorer, one_term("numeric_match"), items),
            (std::vector<double>{1, 1, 1, 0, 0, 1, 1}));
  // Tolerance and a custom pattern (group 1).
  EXPECT_EQ(scores_of(scorer, one_term("numeric_match", R"({"tolerance": 0.5})"),
                      {item("#### 10.4", "10")}),
            std::vector<double>{1});
  EXPECT_EQ(scores_of(scorer, one_term("numeric_match", R"j({"pattern": "answer is (\\d+)"})j"),
                      {item("answer is 42, not 7", "42"), item("#### 42", "42")}),
            (std::vector<double>{1, 0}));
}

// ---- countdown: an independent brute-force solver over exact fractions ----------------------

struct Frac {
  long long n, d;
};
std::optional<Frac> apply(Frac a, Frac b, char op) {
  switch (op) {
    case '+': return Frac{a.n * b.d + b.n * a.d, a.d * b.d};
    case '-': return Frac{a.n * b.d - b.n * a.d, a.d * b.d};
    case '*': return Frac{a.n * b.n, a.d * b.d};
    default:
      if (b.n == 0) return std::nullopt;
      return Frac{a.n * b.d * (b.n < 0 ? -1 : 1), a.d * (b.n < 0 ? -b.n : b.n)};
  }
}
bool equals(Frac f, long long t) { return f.d != 0 && f.n == t * f.d; }

// An expression over all three numbers that evaluates to target, or "".
std::string solve(std::vector<long long> nums, long long target) {
  std::sort(nums.begin(), nums.end());
  const char ops[] = {'+', '-', '*', '/'};
  do {
    for (char o1 : ops) {
      for (char o2 : ops) {
        Frac a{nums[0], 1}, b{nums[1], 1}, c{nums[2], 1};
        auto ab = apply(a, b, o1);
        if (ab) {
          if (auto r = apply(*ab, c, o2); r && equals(*r, target)) {
            return fmt::format("({} {} {}) {} {}", nums[0], o1, nums[1], o2, nums[2]);
          }
        }
        if (auto bc = apply(b, c, o2)) {
          if (auto r = apply(a, *bc, o1); r && equals(*r, target)) {
            return fmt::format("{} {} ({} {} {})", nums[0], o1, nums[1], o2, nums[2]);
          }
        }
      }
    }
  } while (std::next_permutation(nums.begin(), nums.end()));
  return "";
}

TEST(Countdown, BruteForcedExpressionsOnRealRows) {
  SPINDLE_SHARED_OR_SKIP(path, "data/countdown/countdown_cd3_test.jsonl");
  std::vector<RewardItem> items;
  std::vector<double> expected;
  size_t solved = 0;
  for (const std::string& line : testing::read_lines(path.string(), 256)) {
    const auto row = nlohmann::json::parse(line);
    std::vector<long long> nums;
    std::string in = row["input"];
    for (size_t p = 0; p != std::string::npos;) {
      size_t c = in.find(',', p);
      nums.push_back(std::stoll(in.substr(p, c == std::string::npos ? c : c - p)));
      p = c == std::string::npos ? c : c + 1;
    }
    const long long target = std::stoll(row["output"].get<std::string>());
    const std::string expr = solve(nums, target);
    if (expr.empty()) continue;
    ++solved;
    const std::string meta = row.dump();
    // Correct: after "Answer:", as a last line, and with "= target".
    items.push_back(item("Let me think.\nAnswer: " + expr, "", meta));
    expected.push_back(1);
    items.push_back(item("I try things.\n" + expr + " = " + row["output"].get<std::string>(), "",
                         meta));
    expected.push_back(1);
    // Wrong value: the same numbers combined by + only (unless that happens to be right).
    const std::string sum = fmt::format("{} + {} + {}", nums[0], nums[1], nums[2]);
    items.push_back(item("Answer: " + sum, "", meta));
    expected.push_back(nums[0] + nums[1] + nums[2] == target ? 1 : 0);
    // A number reused, a number missing.
    items.push_back(item(fmt::format("Answer: {} + {} + {} + {}", nums[0], nums[0], nums[1],
                                     nums[2]),
                         "", meta));
    expected.push_back(0);
    items.push_back(item(fmt::format("Answer: {} + {}", nums[0], nums[1]), "", meta));
    expected.push_back(0);
    items.push_back(item("Answer: I give up", "", meta));
    expected.push_back(0);
  }
  ASSERT_GE(solved, 100u) << "the brute force should solve most cd3 rows";
  RewardScorer scorer(host_options());
  EXPECT_EQ(scores_of(scorer, one_term("countdown"), items), expected);
  // format_score: a parseable but wrong expression earns partial credit, none earns 0.
  const std::string meta = R"({"input": "30,100,93", "output": "23"})";
  EXPECT_EQ(scores_of(scorer, one_term("countdown", R"({"format_score": 0.1})"),
                      {item("Answer: 100 - 93 + 30", "", meta),
                       item("Answer: 30 - (100 - 93)", "", meta),
                       item("Answer: 30 / (100 - 93)", "", meta), item("Answer: nope", "", meta)}),
            (std::vector<double>{0.1, 1, 0.1, 0}));
}

TEST(Regex, SearchFullMatchAndScores) {
  RewardScorer scorer(host_options());
  const std::vector<RewardItem> items = {item("<think>a</think> 42"), item("42"), item("")};
  EXPECT_EQ(scores_of(scorer, one_term("regex", R"({"pattern": "\\d+"})"), items),
            (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(scores_of(scorer, one_term("regex", R"({"pattern": "\\d+", "full_match": true})"),
                      items),
            (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(scores_of(scorer,
                      one_term("regex", R"({"pattern": "^<THINK>.*</think>", "score_match": 2,
                                            "score_miss": -1, "case_insensitive": true})"),
                      items),
            (std::vector<double>{2, -1, -1}));
}

TEST(Keywords, FractionAndAllModes) {
  RewardScorer scorer(host_options());
  const std::vector<RewardItem> items = {
      item("Once upon a time, Lily saw a big Dog."),  // present: lily, dog; absent: none
      item("Tom had a cat. The dog was sad."),         // present: dog; absent: sad
      item("Nothing here."),
  };
  const std::string cfg = R"({"present": ["lily", "dog"], "absent": ["sad", "scary"]})";
  EXPECT_EQ(scores_of(scorer, one_term("keywords", cfg), items),
            (std::vector<double>{1.0, 0.5 - 0.5, 0.0}));
  EXPECT_EQ(scores_of(scorer,
                      one_term("keywords", R"({"present": ["lily", "dog"], "absent": ["sad"],
                                               "mode": "all"})"),
                      items),
            (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(scores_of(scorer, one_term("keywords", R"({"present": ["Dog"], "case_sensitive": true})"),
                      items),
            (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(scores_of(scorer, one_term("keywords", R"({"present": ["ca"], "whole_words": true})"),
                      {item("a cat"), item("ca va")}),
            (std::vector<double>{0, 1}));
}

TEST(Length, TokensAndCharsWithLinearPenalty) {
  RewardScorer scorer(host_options());
  auto with_tokens = [](size_t n) {
    RewardItem it = item("x");
    it.completion_tokens.assign(n, 7);
    return it;
  };
  const std::vector<RewardItem> items = {with_tokens(10), with_tokens(12), with_tokens(15),
                                         with_tokens(40), with_tokens(0)};
  // target 10, tolerance 2, 0.1 per token beyond: 1, 1, 1-0.3, floor 0, 1-0.8.
  const std::vector<double> s = scores_of(
      scorer,
      one_term("length", R"({"unit": "tokens", "target": 10, "tolerance": 2,
                             "penalty_per_unit": 0.1})"),
      items);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0], 1);
  EXPECT_EQ(s[1], 1);
  EXPECT_DOUBLE_EQ(s[2], 1 - 0.1 * 3);
  EXPECT_EQ(s[3], 0);
  EXPECT_DOUBLE_EQ(s[4], 1 - 0.1 * 8);
  // chars counts code points: "héllo" is 5.
  EXPECT_EQ(scores_of(scorer, one_term("length", R"({"unit": "chars", "target": 5})"),
                      {item("h\xC3\xA9llo"), item("hello!")}),
            (std::vector<double>{1, 1 - 1.0 / 5}));
}

TEST(JsonValid, WholeBlockAndRequiredKeys) {
  RewardScorer scorer(host_options());
  const std::vector<RewardItem> items = {
      item(R"( {"a": 1, "b": [1, 2]} )"), item(R"(Sure: {"a": "}{"} done)"), item("[1, 2"),
      item(""), item("null"), item(R"({"b": 1})")};
  EXPECT_EQ(scores_of(scorer, one_term("json_valid"), items),
            (std::vector<double>{1, 0, 0, 0, 1, 1}));
  EXPECT_EQ(scores_of(scorer, one_term("json_valid", R"({"extract": "block"})"), items),
            (std::vector<double>{1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(scores_of(scorer, one_term("json_valid", R"({"extract": "block",
                                                        "required_keys": ["a"]})"),
                      items),
            (std::vector<double>{1, 1, 0, 0, 0, 0}));
}

TEST(RewardScorer, WeightedTotalIsExactSum) {
  RewardScorer scorer(host_options());
  RewardSpec spec = RewardSpec::parse(
      R"({"terms": [{"name": "acc", "plugin": "numeric_match", "weight": 0.75},
                    {"name": "fmt", "plugin": "regex", "weight": -0.5,
                     "config": {"pattern": "####"}},
                    {"name": "len", "plugin": "length", "weight": 0.1,
                     "config": {"unit": "chars", "target": 8}}]})",
      "spec");
  const std::vector<RewardItem> items = {item("#### 12", "12"), item("12", "12"),
                                         item("#### 13", "12")};
  scorer.validate(spec);
  RewardBatch b = scorer.score(spec, items);
  ASSERT_EQ(b.per_term.size(), 3u);
  ASSERT_EQ(b.info.size(), 3u);
  for (size_t i = 0; i < items.size(); ++i) {
    const double want =
        0.75 * b.per_term[0][i] + -0.5 * b.per_term[1][i] + 0.1 * b.per_term[2][i];
    EXPECT_EQ(b.total[i], want) << "item " << i;
  }
  EXPECT_EQ(b.per_term[0], (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(b.per_term[1], (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(b.info[0][0], "extracted 12");
  EXPECT_EQ(scorer.host_restarts(), 0u);
}

TEST(RewardScorer, ListsBuiltinPluginsWithSchemas) {
  RewardScorer scorer(host_options());
  std::vector<std::string> names;
  for (const PluginInfo& p : scorer.plugins()) {
    names.push_back(p.name);
    EXPECT_EQ(p.abi_version, 1u);
    EXPECT_EQ(p.version, "1.0.0") << p.name;
    EXPECT_FALSE(p.description.empty()) << p.name;
    EXPECT_TRUE(nlohmann::json::parse(p.config_schema_json).is_object()) << p.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"countdown", "json_valid", "keywords", "length",
                                             "numeric_match", "regex"}));
}

}  // namespace
}  // namespace spindle::rewards
