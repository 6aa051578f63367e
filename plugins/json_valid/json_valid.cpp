// json_valid: 1 if the completion is valid JSON, else 0.
// extract "whole" (default): the whole completion (surrounding whitespace allowed) must parse.
// extract "block": the first balanced {...} or [...] block (string-aware bracket matching) is
// parsed; text around it is ignored. required_keys: the value must also be an object holding
// every listed key, else 0.

#include <spindle/reward_plugin.hpp>

#include <optional>

#include "plugin_util.h"

namespace {

using spindle::reward_plugins::Config;
using spindle::reward_plugins::json;
using spindle::reward_sdk::Item;
using spindle::reward_sdk::Score;

// The first balanced {...} / [...] block, or nullopt.
std::optional<std::string_view> first_block(std::string_view s) {
  const size_t start = s.find_first_of("{[");
  if (start == std::string_view::npos) return std::nullopt;
  std::string stack;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') stack += c;
    else if (c == '}' || c == ']') {
      if (stack.empty() || (c == '}') != (stack.back() == '{')) return std::nullopt;
      stack.pop_back();
      if (stack.empty()) return s.substr(start, i + 1 - start);
    }
  }
  return std::nullopt;
}

class JsonValid {
 public:
  explicit JsonValid(const std::string& config_json) {
    Config c("json_valid", config_json);
    c.only({"extract", "required_keys"});
    const std::string extract = c.str("extract", "whole");
    if (extract != "whole" && extract != "block") c.fail_field("extract", "\"whole\" or \"block\"");
    block_ = extract == "block";
    required_ = c.strings("required_keys");
  }

  Score score(const Item& item) {
    std::string_view text = item.completion;
    if (block_) {
      auto b = first_block(text);
      if (!b) return {0.0, "no balanced {...} or [...] block"};
      text = *b;
    }
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return {0.0, "not valid JSON"};
    for (const std::string& k : required_) {
      if (!j.is_object() || !j.contains(k)) return {0.0, "missing key '" + k + "'"};
    }
    return {1.0, "valid"};
  }

 private:
  bool block_ = false;
  std::vector<std::string> required_;
};

}  // namespace

namespace {
constexpr const char kConfigSchema[] = R"schema({"type": "object", "additionalProperties": false, "properties": {
  "extract": {"type": "string", "enum": ["whole", "block"], "description": "default whole"},
  "required_keys": {"type": "array", "items": {"type": "string"}}}})schema";
}  // namespace

SPINDLE_REWARD_PLUGIN(JsonValid, "json_valid",
                      "1 if the completion (or its first {...}/[...] block) parses as JSON with "
                      "the required keys",
                      kConfigSchema, "1.0.0")
