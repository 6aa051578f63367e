// Test plugin: aborts the host process in score_batch (create works).
#include <spindle/reward_plugin.hpp>

#include <cstdlib>

namespace {
struct Crash {
  explicit Crash(const std::string&) {}
  spindle::reward_sdk::Score score(const spindle::reward_sdk::Item&) { std::abort(); }
};
}  // namespace

SPINDLE_REWARD_PLUGIN(Crash, "crash", "test: aborts while scoring", R"({"type": "object"})")
