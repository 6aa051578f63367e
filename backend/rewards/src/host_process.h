#pragma once
// Scorer side: one spindle-reward-host child process and the PAIR socket to it.
// Construction spawns the child (posix_spawn, as the leader of a new process group, under the
// options' memory limit; its stdout goes to our stderr so the CLI's stdout carries only
// results), binds ipc://<run_dir>/host-<seq>.sock and waits for the host's hello.
// Destruction asks the host to shut down, waits briefly, then kills and reaps it. Whenever the
// host is killed or found dead, its process tree and process group are killed too (what a
// plugin forked; host_protocol.h "Containment").
// Used by one thread (RewardScorer's caller).

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

#include "spindle/rewards/rewards.h"

namespace spindle::rewards {

// Why a call got no reply.
struct HostFailure {
  // memory_limit: the host exited with wire::kHostExitMemoryLimit.
  enum class Kind { died, timed_out, memory_limit } kind;
  std::string detail;  // "killed by signal 6 (Aborted)", "no reply within 200 ms"
};

class HostProcess {
 public:
  // options.host_binary and plugin_dirs must be resolved (RewardScorer does).
  HostProcess(zmq::context_t& zctx, const RewardHostOptions& options,
              const std::filesystem::path& run_dir, int seq);
  ~HostProcess();
  HostProcess(const HostProcess&) = delete;
  HostProcess& operator=(const HostProcess&) = delete;

  // Sends `request` and waits up to `timeout` for the reply. Throws HostFailure when the host
  // dies or does not answer in time (the host is then killed; this object is unusable).
  nlohmann::json call(const nlohmann::json& request, std::chrono::milliseconds timeout);
  bool alive() const { return pid_ > 0; }

 private:
  // Waits for one message; HostFailure on exit or timeout.
  nlohmann::json receive(std::chrono::milliseconds timeout);
  void kill_and_reap();
  // After the host is reaped: kills what remains of its process group (what a plugin forked
  // and did not move out of it), once.
  void kill_group();

  zmq::socket_t sock_;
  std::string endpoint_path_;
  pid_t pid_ = -1;   // the host; also its process group's id
  pid_t pgid_ = -1;  // kept after the host is reaped: the group may outlive it
};

}  // namespace spindle::rewards
