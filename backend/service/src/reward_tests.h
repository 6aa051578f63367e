#pragma once
// The reward_test op (PROTOCOL.md "Reward test"): sample `num_samples` completions of every row
// from a policy (or the base), score them with a reward spec, reply with the per-term and total
// distributions and every scored sample. `spindle reward test` and the Studio's reward designer
// both call it.
//
// Scoring blocks on a reward host process, so a request runs on one of RewardTester's worker
// threads, never on the front, catalog or engine thread. A request on a worker:
//   1. parse the spec and validate every term against its plugin (before any sampling: a bad
//      spec costs no tokens; invalid_argument / not_found naming the term);
//   2. resolve the address (a bare base id, or a policy revision on the catalog thread, waited
//      for; another tenant's policy is not_found like a missing one);
//   3. submit one sample job per row at once (they batch in the scheduler) and wait for all;
//   4. score every completion in one call, summarize, reply through the reply channel.
// Each worker owns one rewards::RewardScorer (single-threaded by contract), so one reward-host
// child per worker, started on its first request, under --reward-host-memory-mib; after a
// plugin crash, timeout or memory limit the request fails with the scorer's typed error and the
// scorer starts a fresh host for the next one. Sampling takes the tenant's queued-token and
// serving-slot quotas for every row at once (tenant_quotas.h) and gives them back when the rows
// are sampled.
//
// The same workers serve reward_plugins, plugin_rescan and datasets (worker_ops.h). A
// plugin_rescan bumps the plugin generation when posted; a worker whose scorer scanned an older
// generation rescans (restarts its host) before its next request, so after a rescan's reply
// every later request on any worker sees the plugin folders as they were at the rescan or later.
//
// Threading: post() is safe from any thread. stop() runs what is queued, then joins; call it
// while the scheduler and the catalog thread still run and before the ZeroMQ context closes.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "reply_channel.h"

namespace spindle::service {

struct Daemon;

class RewardTester {
 public:
  // Starts `workers` (>= 1) threads.
  RewardTester(Daemon& d, int workers);
  ~RewardTester() { stop(); }
  RewardTester(const RewardTester&) = delete;
  RewardTester& operator=(const RewardTester&) = delete;

  // Queues a validated reward_test, reward_plugins, plugin_rescan or datasets request; exactly
  // one reply is sent for it.
  void post(Call call, protocol::Request request);
  // The next reward test of every worker starts a fresh reward host, which rescans the plugin
  // folders (what a plugin_rescan request does; SIGHUP / systemctl reload).
  void rescan_plugins() { plugin_generation_.fetch_add(1); }
  void stop();

 private:
  struct Task {
    Call call;
    protocol::Request request;
  };
  void loop();

  Daemon& d_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mutex_
  bool stopping_ = false;   // guarded by mutex_
  std::atomic<uint64_t> plugin_generation_{0};  // plugin_rescan requests posted
  std::vector<std::thread> threads_;
};

// Front-thread entry: hands the request (any op post() takes) to d.reward_tests.
void dispatch_reward_test(Daemon& d, Call call, protocol::Request request);

}  // namespace spindle::service
