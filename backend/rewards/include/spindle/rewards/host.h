#pragma once
// The reward host side (runs inside `spindle-reward-host`, never in the daemon): loads reward
// plugins with dlopen(RTLD_NOW | RTLD_LOCAL) and serves RewardScorer's requests on one ZeroMQ
// PAIR socket from one thread. The wire protocol is documented in src/host_protocol.h.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace spindle::rewards {

struct RewardHostServerOptions {
  std::string endpoint;                             // connect here (the scorer binds)
  std::vector<std::filesystem::path> plugin_dirs;   // empty = default_plugin_dirs()
  int parent_pid = 0;  // > 0: exit when that process goes away (PR_SET_PDEATHSIG)
  // RLIMIT_AS of the host in MiB (0 = none); reaching it exits with a status the scorer reports
  // as the memory limit (src/host_protocol.h "Containment").
  int64_t memory_limit_mib = 0;
};

// Serves until a shutdown request or until the socket fails; returns the process exit code.
int run_reward_host(const RewardHostServerOptions& options);

// Plugin folders searched when none are given, in order: $SPINDLE_REWARD_PLUGIN_PATH
// (colon-separated), the build tree's plugin folder, <exe dir>/../lib/<multiarch>/spindle/plugins.
// Only folders that exist are returned.
std::vector<std::filesystem::path> default_plugin_dirs();

// The host binary when RewardHostOptions::host_binary is empty: $SPINDLE_REWARD_HOST, else
// spindle-reward-host beside /proc/self/exe, else the build tree's. Throws not_found.
std::filesystem::path default_host_binary();

}  // namespace spindle::rewards
