// numeric_match: 1 if the number extracted from the completion equals the reference answer's.
//
// Reference: the text after the last "####" (GSM8K answers), else the whole reference.
// Completion: the last match of config.pattern (its group 1 when it has one); by default the
// last "#### N", else the last number in the completion. Both sides are normalised before
// parsing: "$", spaces and thousands commas removed, so "1,234.0" == "1234". Equal means
// |a - b| <= config.tolerance (absolute, default 0). A completion with no number scores 0; a
// reference that is not a number fails the call (SPINDLE_REWARD_INVALID_ITEM).

#include <spindle/reward_plugin.hpp>

#include <cmath>
#include <cstdlib>
#include <optional>

#include "plugin_util.h"

namespace {

using spindle::reward_plugins::Config;
using spindle::reward_plugins::Regex;
using spindle::reward_sdk::Item;
using spindle::reward_sdk::Score;

constexpr const char* kNumber = R"((?:(?<![0-9A-Za-z_.])-)?[0-9][0-9,]*(?:\.[0-9]+)?)";

std::optional<double> parse_number(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (c == ',' || c == '$' || c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    s += c;
  }
  while (!s.empty() && s.back() == '.') s.pop_back();
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

class NumericMatch {
 public:
  explicit NumericMatch(const std::string& config_json) {
    Config c("numeric_match", config_json);
    c.only({"pattern", "tolerance"});
    tolerance_ = c.num("tolerance", 0.0);
    if (!(tolerance_ >= 0.0)) c.fail_field("tolerance", "a number >= 0");
    if (c.has("pattern")) {
      custom_.emplace(c.str("pattern", ""), "numeric_match: config.pattern");
    }
  }

  Score score(const Item& item) {
    std::string_view ref = item.reference;
    if (size_t p = ref.rfind("####"); p != std::string_view::npos) ref = ref.substr(p + 4);
    std::optional<double> want = parse_number(ref);
    if (!want) {
      throw spindle::reward_sdk::ItemError("numeric_match: reference '" + std::string(ref) +
                                           "' is not a number");
    }
    std::optional<Regex::Match> m;
    if (custom_) {
      m = custom_->last(item.completion);
    } else {
      m = hashes_.last(item.completion);
      if (!m) m = number_.last(item.completion);
    }
    if (!m) return {0.0, "no number found"};
    std::optional<double> got = parse_number(m->text);
    if (!got) return {0.0, "extracted '" + m->text + "' is not a number"};
    const bool ok = std::fabs(*got - *want) <= tolerance_;
    return {ok ? 1.0 : 0.0, "extracted " + m->text};
  }

 private:
  double tolerance_ = 0.0;
  std::optional<Regex> custom_;
  Regex hashes_{std::string(R"(####\s*\$?\s*()") + kNumber + ")", "numeric_match: #### pattern"};
  Regex number_{std::string("(") + kNumber + ")", "numeric_match: number pattern"};
};

}  // namespace

namespace {
constexpr const char kConfigSchema[] = R"schema({"type": "object", "additionalProperties": false, "properties": {
  "pattern": {"type": "string", "description": "PCRE2; last match, group 1 if any, is the answer (default: '#### N', else the last number)"},
  "tolerance": {"type": "number", "minimum": 0, "description": "absolute tolerance (default 0)"}}})schema";
}  // namespace

SPINDLE_REWARD_PLUGIN(NumericMatch, "numeric_match",
                      "1 if the completion's final number equals the reference answer "
                      "(GSM8K '#### N'; commas and trailing .0 normalised)",
                      kConfigSchema, "1.0.0")
