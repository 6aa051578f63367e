// regex: a format reward. score_match (default 1) if the completion matches config.pattern
// (PCRE2, UTF), else score_miss (default 0). full_match: the whole completion must match
// (anchored at both ends); otherwise a match anywhere counts. case_insensitive adds (?i).

#include <spindle/reward_plugin.hpp>

#include "plugin_util.h"

namespace {

using spindle::reward_plugins::Config;
using spindle::reward_plugins::Regex;
using spindle::reward_sdk::Item;
using spindle::reward_sdk::Score;

class RegexReward {
 public:
  explicit RegexReward(const std::string& config_json) : config_("regex", config_json) {
    config_.only({"pattern", "full_match", "case_insensitive", "score_match", "score_miss"});
    if (!config_.has("pattern")) config_.fail_field("pattern", "a string (required)");
    full_match_ = config_.boolean("full_match", false);
    score_match_ = config_.num("score_match", 1.0);
    score_miss_ = config_.num("score_miss", 0.0);
    re_.emplace(config_.str("pattern", ""), "regex: config.pattern",
                config_.boolean("case_insensitive", false) ? PCRE2_CASELESS : 0u);
  }

  Score score(const Item& item) {
    const uint32_t opts = full_match_ ? (PCRE2_ANCHORED | PCRE2_ENDANCHORED) : 0u;
    const bool hit = !re_->find_all(item.completion, opts, /*max_matches=*/1).empty();
    return {hit ? score_match_ : score_miss_, hit ? "match" : "no match"};
  }

 private:
  Config config_;
  bool full_match_ = false;
  double score_match_ = 1.0, score_miss_ = 0.0;
  std::optional<Regex> re_;
};

}  // namespace

namespace {
constexpr const char kConfigSchema[] = R"schema({"type": "object", "additionalProperties": false, "required": ["pattern"], "properties": {
  "pattern": {"type": "string", "description": "PCRE2 pattern (UTF)"},
  "full_match": {"type": "boolean", "description": "the whole completion must match (default false: search)"},
  "case_insensitive": {"type": "boolean"},
  "score_match": {"type": "number", "description": "default 1"},
  "score_miss": {"type": "number", "description": "default 0"}}})schema";
}  // namespace

SPINDLE_REWARD_PLUGIN(RegexReward, "regex",
                      "format reward: score_match if the completion matches a PCRE2 pattern, "
                      "else score_miss",
                      kConfigSchema, "1.0.0")
