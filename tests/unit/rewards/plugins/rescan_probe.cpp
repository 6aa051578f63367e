// Test plugin for plugin_rescan: built OUTSIDE every plugin folder (tests/rescan_plugins), copied
// into a daemon's plugin folder by the test after the daemon started. Scores 0.25 per item.
#include <spindle/reward_plugin.hpp>

namespace {
struct RescanProbe {
  explicit RescanProbe(const std::string&) {}
  spindle::reward_sdk::Score score(const spindle::reward_sdk::Item&) { return {0.25, "probe"}; }
};
}  // namespace

SPINDLE_REWARD_PLUGIN(RescanProbe, "rescan_probe", "test: scores 0.25 (plugin_rescan)",
                      R"({"type": "object"})", "0.3.1")
