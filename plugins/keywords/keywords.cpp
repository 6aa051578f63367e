// keywords: keyword presence and absence (e.g. steering TinyStories/stories260K samples).
//
// mode "fraction" (default): score = found(present) / |present|  -  found(absent) / |absent|,
// each term 0 when its list is empty, so the score lies in [-1, 1].
// mode "all": 1 if every present keyword occurs and no absent keyword does, else 0.
// A keyword "occurs" as a substring (case-insensitive for ASCII unless case_sensitive); with
// whole_words it must not be preceded or followed by an ASCII letter, digit or '_'.

#include <spindle/reward_plugin.hpp>

#include <cctype>

#include "plugin_util.h"

namespace {

using spindle::reward_plugins::Config;
using spindle::reward_sdk::Item;
using spindle::reward_sdk::Score;

bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Keywords {
 public:
  explicit Keywords(const std::string& config_json) {
    Config c("keywords", config_json);
    c.only({"present", "absent", "case_sensitive", "whole_words", "mode"});
    present_ = c.strings("present");
    absent_ = c.strings("absent");
    case_sensitive_ = c.boolean("case_sensitive", false);
    whole_words_ = c.boolean("whole_words", false);
    const std::string mode = c.str("mode", "fraction");
    if (mode != "fraction" && mode != "all") c.fail_field("mode", "\"fraction\" or \"all\"");
    all_ = mode == "all";
    if (present_.empty() && absent_.empty()) c.fail("config needs present or absent keywords");
    for (const auto* list : {&present_, &absent_}) {
      for (const std::string& k : *list) {
        if (k.empty()) c.fail("keywords must not be empty strings");
      }
    }
    if (!case_sensitive_) {
      for (auto* list : {&present_, &absent_})
        for (std::string& k : *list) k = lower(k);
    }
  }

  Score score(const Item& item) {
    const std::string text = case_sensitive_ ? std::string(item.completion) : lower(item.completion);
    size_t hit_present = 0, hit_absent = 0;
    std::string info;
    for (const std::string& k : present_) {
      if (occurs(text, k)) ++hit_present;
      else info += (info.empty() ? "missing: " : ", ") + k;
    }
    std::string bad;
    for (const std::string& k : absent_) {
      if (occurs(text, k)) ++hit_absent, bad += (bad.empty() ? "" : ", ") + k;
    }
    if (!bad.empty()) info += (info.empty() ? "" : "; ") + std::string("forbidden: ") + bad;
    double s;
    if (all_) {
      s = (hit_present == present_.size() && hit_absent == 0) ? 1.0 : 0.0;
    } else {
      s = (present_.empty() ? 0.0 : double(hit_present) / double(present_.size())) -
          (absent_.empty() ? 0.0 : double(hit_absent) / double(absent_.size()));
    }
    return {s, info};
  }

 private:
  static std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  }
  bool occurs(const std::string& text, const std::string& k) const {
    for (size_t p = text.find(k); p != std::string::npos; p = text.find(k, p + 1)) {
      if (!whole_words_) return true;
      const bool left_ok = p == 0 || !is_word(text[p - 1]);
      const bool right_ok = p + k.size() >= text.size() || !is_word(text[p + k.size()]);
      if (left_ok && right_ok) return true;
    }
    return false;
  }

  std::vector<std::string> present_, absent_;
  bool case_sensitive_ = false, whole_words_ = false, all_ = false;
};

}  // namespace

namespace {
constexpr const char kConfigSchema[] = R"schema({"type": "object", "additionalProperties": false, "properties": {
  "present": {"type": "array", "items": {"type": "string"}},
  "absent": {"type": "array", "items": {"type": "string"}},
  "case_sensitive": {"type": "boolean", "description": "default false"},
  "whole_words": {"type": "boolean", "description": "default false"},
  "mode": {"type": "string", "enum": ["fraction", "all"], "description": "default fraction"}}})schema";
}  // namespace

SPINDLE_REWARD_PLUGIN(Keywords, "keywords",
                      "keyword presence/absence: fraction of wanted keywords found minus "
                      "fraction of forbidden ones found (or all-or-nothing)",
                      kConfigSchema, "1.0.0")
