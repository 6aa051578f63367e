// Test plugin: never returns from score_batch.
#include <spindle/reward_plugin.hpp>
#include <unistd.h>

namespace {
struct Hang {
  explicit Hang(const std::string&) {}
  spindle::reward_sdk::Score score(const spindle::reward_sdk::Item&) {
    for (;;) pause();
  }
};
}  // namespace

SPINDLE_REWARD_PLUGIN(Hang, "hang", "test: hangs while scoring", R"({"type": "object"})")
