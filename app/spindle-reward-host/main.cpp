// spindle-reward-host: runs reward plugins in their own process so a plugin that crashes or
// hangs never takes the daemon down (DESIGN.md "Rewards"). Started by RewardScorer; the logic
// lives in backend/rewards (run_reward_host).

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "spindle/rewards/host.h"
#include "spindle/version.h"

int main(int argc, char** argv) {
  spindle::rewards::RewardHostServerOptions options;
  std::vector<std::string> dirs;
  CLI::App app{"spindle-reward-host: serves reward plugins to a RewardScorer over ZeroMQ"};
  app.set_version_flag("--version", "spindle-reward-host " SPINDLE_VERSION);
  app.add_option("--endpoint", options.endpoint, "ZeroMQ endpoint to connect to")->required();
  app.add_option("--plugin-dir", dirs, "plugin folder (repeatable; default: built-in dirs)");
  app.add_option("--parent-pid", options.parent_pid, "exit when this process exits");
  app.add_option("--memory-limit-mib", options.memory_limit_mib,
                 "address-space limit (RLIMIT_AS) in MiB; reaching it exits with status 88 "
                 "(0: none)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  for (const std::string& d : dirs) options.plugin_dirs.emplace_back(d);
  try {
    return spindle::rewards::run_reward_host(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindle-reward-host: error: %s\n", e.what());
    return 1;
  }
}
