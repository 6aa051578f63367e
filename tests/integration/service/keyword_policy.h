#pragma once
// A GRPO run policy for the service suites: rank-4 LoRA on stories260K rewarded by the
// keywords plugin for `word` in its completions of three inline prompts.

#include <nlohmann/json.hpp>

#include <string>

namespace spindle::testing {

inline nlohmann::json keyword_policy(const std::string& name, const std::string& word) {
  return {{"name", name},
          {"rank", 4},
          {"alpha", 8},
          {"learning_rate", 1e-2},
          {"dataset", {{"name", "inline"}, {"prompts", {"Once upon a time", "One day", "Lily saw"}}}},
          {"reward", {{"terms", {{{"name", word}, {"plugin", "keywords"}, {"weight", 1},
                                   {"config", {{"present", {word}}}}}}}}}};
}

}  // namespace spindle::testing
