// word_count: an example Spindle reward plugin (shipped by spindle-plugin-dev).
//
// score = min(1, words / target): whitespace-separated words of the completion against
// config.target (default 20). Written against spindle/reward_plugin.hpp, the header-only C++
// helper over the C ABI in spindle/reward.h: a class constructed from the JSON config (throw on
// a bad one) with a score() per item; SPINDLE_REWARD_PLUGIN exports the entry point. The host
// validates the config against kConfigSchema before create() and calls the plugin from one
// thread; exceptions never cross the C ABI.

#include <spindle/reward_plugin.hpp>

#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace {

// The number `key` of a flat JSON object (already schema-checked by the host), or `fallback`.
double number_field(const std::string& json, const std::string& key, double fallback) {
  const std::string quoted = "\"" + key + "\"";
  const size_t at = json.find(quoted);
  if (at == std::string::npos) return fallback;
  const size_t colon = json.find(':', at + quoted.size());
  return colon == std::string::npos ? fallback : std::strtod(json.c_str() + colon + 1, nullptr);
}

class WordCount {
 public:
  explicit WordCount(const std::string& config_json) {
    target_ = number_field(config_json, "target", 20);
    if (!(target_ >= 1)) throw std::invalid_argument("word_count: config.target must be >= 1");
  }

  spindle::reward_sdk::Score score(const spindle::reward_sdk::Item& item) const {
    int words = 0;
    bool in_word = false;
    for (const char c : item.completion) {
      const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
      if (!space && !in_word) ++words;
      in_word = !space;
    }
    const double s = words >= target_ ? 1.0 : double(words) / target_;
    return {s, std::to_string(words) + " words"};
  }

 private:
  double target_ = 20;
};

constexpr const char kConfigSchema[] = R"schema({"type": "object", "additionalProperties": false,
  "properties": {"target": {"type": "integer", "minimum": 1, "default": 20,
                            "description": "words for a full score"}}})schema";

}  // namespace

SPINDLE_REWARD_PLUGIN(WordCount, "word_count", "words in the completion against a target",
                      kConfigSchema, "0.1.0")
