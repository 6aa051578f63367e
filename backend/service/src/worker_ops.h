#pragma once
// The ops that RewardTester's workers serve besides reward_test (PROTOCOL.md "Reward plugins
// and datasets"): they block on a reward host or on files, so they never run on the front,
// catalog or engine thread. Each sends exactly one reply through d.replies.
//
//   reward_plugins  the plugins the worker's reward host finds, sorted by name.
//   plugin_rescan   the same after a rescan: RewardTester::post bumps the plugin generation
//                   first, so this worker (and every other one before its next request)
//                   restarts its reward host, which scans the plugin folders again. GRPO runs
//                   start a host of their own, so runs started afterwards see the new plugins.
//   datasets        rl's built-in datasets under the daemon's data root: loaded once per daemon
//                   (the first request pays for reading gsm8k), then served from memory.

#include <mutex>
#include <optional>

#include "daemon_state.h"
#include "spindle/rewards/rewards.h"

namespace spindle::service {

// The datasets reply with kMaxExamples examples each, loaded on first use (Daemon::datasets).
struct DatasetCache {
  std::mutex mutex;
  std::optional<protocol::DatasetsReply> reply;  // guarded by mutex
};

void reply_reward_plugins(Daemon& d, rewards::RewardScorer& scorer, const Call& call);
void reply_datasets(Daemon& d, const Call& call, const protocol::DatasetsRequest& request);

// The data root of built-in datasets: --data-root, else $SPINDLE_SHARED_DIR/data, else "".
std::filesystem::path data_root_of(const ServiceConfig& config);

}  // namespace spindle::service
