#pragma once
// Shared set-up for test_rewards: a RewardScorer over the real spindle-reward-host binary,
// the built-in plugin folder and (optionally) the misbehaving test plugins' folder.

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "spindle/rewards/rewards.h"

namespace spindle::rewards::testing {

inline RewardHostOptions host_options(bool with_test_plugins = false,
                                      std::chrono::milliseconds timeout =
                                          std::chrono::milliseconds(20000)) {
  RewardHostOptions o;
  o.host_binary = SPINDLE_TEST_REWARD_HOST;
  o.plugin_dirs = {SPINDLE_TEST_BUILTIN_PLUGIN_DIR};
  if (with_test_plugins) o.plugin_dirs.emplace_back(SPINDLE_TEST_REWARD_PLUGIN_DIR);
  o.timeout = timeout;
  return o;
}

// A spec of one term.
inline RewardSpec one_term(const std::string& plugin, const std::string& config_json = "{}",
                           double weight = 1.0) {
  RewardSpec s;
  s.terms.push_back({plugin, plugin, weight, config_json});
  return s;
}

inline RewardItem item(std::string completion, std::string reference = "",
                       std::string metadata = "{}") {
  RewardItem it;
  it.completion = std::move(completion);
  it.reference = std::move(reference);
  it.metadata_json = std::move(metadata);
  return it;
}

inline std::vector<std::string> read_lines(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line;
  while (out.size() < max_lines && std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace spindle::rewards::testing
