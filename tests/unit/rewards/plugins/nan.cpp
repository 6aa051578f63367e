// Test plugin: item 1 scores NaN, the others 0.5.
#include <spindle/reward_plugin.hpp>

#include <limits>

namespace {
struct Nan {
  explicit Nan(const std::string&) {}
  spindle::reward_sdk::Score score(const spindle::reward_sdk::Item&) {
    return {calls_++ == 1 ? std::numeric_limits<double>::quiet_NaN() : 0.5, ""};
  }
  int calls_ = 0;
};
}  // namespace

SPINDLE_REWARD_PLUGIN(Nan, "nan", "test: item 1 scores NaN", R"({"type": "object"})")
