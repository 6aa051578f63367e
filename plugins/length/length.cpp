// length: a length target. len = completion tokens (unit "tokens") or Unicode code points
// (unit "chars"); d = |len - target|. score = 1 when d <= tolerance, else
// max(floor, 1 - penalty_per_unit * (d - tolerance)): linear decrease outside the band.
// Defaults: tolerance 0, penalty_per_unit 1/max(target, 1), floor 0.

#include <spindle/reward_plugin.hpp>

#include <algorithm>
#include <cmath>

#include "plugin_util.h"

namespace {

using spindle::reward_plugins::Config;
using spindle::reward_sdk::Item;
using spindle::reward_sdk::Score;

class Length {
 public:
  explicit Length(const std::string& config_json) {
    Config c("length", config_json);
    c.only({"unit", "target", "tolerance", "penalty_per_unit", "floor"});
    const std::string unit = c.str("unit", "tokens");
    if (unit != "tokens" && unit != "chars") c.fail_field("unit", "\"tokens\" or \"chars\"");
    tokens_ = unit == "tokens";
    if (!c.has("target")) c.fail_field("target", "a number >= 0 (required)");
    target_ = c.num("target", 0);
    if (!(target_ >= 0)) c.fail_field("target", "a number >= 0 (required)");
    tolerance_ = c.num("tolerance", 0);
    if (!(tolerance_ >= 0)) c.fail_field("tolerance", "a number >= 0");
    penalty_ = c.num("penalty_per_unit", 1.0 / std::max(target_, 1.0));
    if (!(penalty_ >= 0)) c.fail_field("penalty_per_unit", "a number >= 0");
    floor_ = c.num("floor", 0.0);
  }

  Score score(const Item& item) {
    size_t len = 0;
    if (tokens_) {
      len = item.completion_tokens.size();
    } else {
      for (char ch : item.completion) len += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    }
    const double d = std::fabs(double(len) - target_);
    const double s = d <= tolerance_ ? 1.0 : std::max(floor_, 1.0 - penalty_ * (d - tolerance_));
    return {s, "length " + std::to_string(len) + (tokens_ ? " tokens" : " chars")};
  }

 private:
  bool tokens_ = true;
  double target_ = 0, tolerance_ = 0, penalty_ = 0, floor_ = 0;
};

}  // namespace

namespace {
constexpr const char kConfigSchema[] = R"schema({"type": "object", "additionalProperties": false, "required": ["target"], "properties": {
  "unit": {"type": "string", "enum": ["tokens", "chars"], "description": "default tokens"},
  "target": {"type": "number", "minimum": 0},
  "tolerance": {"type": "number", "minimum": 0, "description": "default 0"},
  "penalty_per_unit": {"type": "number", "minimum": 0, "description": "default 1/target"},
  "floor": {"type": "number", "description": "lowest score (default 0)"}}})schema";
}  // namespace

SPINDLE_REWARD_PLUGIN(Length, "length",
                      "length target: 1 within target +- tolerance, decreasing linearly outside "
                      "(tokens or characters)",
                      kConfigSchema, "1.0.0")
