// Test plugin: declares ABI version 999 (a plugin built against a future reward.h).
#include <spindle/reward.h>

extern "C" SPINDLE_REWARD_EXPORT const spindle_reward_plugin* spindle_reward_plugin_get(void) {
  static const spindle_reward_plugin table = {999u, sizeof(spindle_reward_plugin), "bad_abi",
                                              "test: wrong ABI", "{}", nullptr, nullptr, nullptr};
  return &table;
}
