#pragma once
// Scorer side: one spindle-reward-host child process and the PAIR socket to it.
// Construction spawns the child (posix_spawn; its stdout goes to our stderr so the CLI's stdout
// carries only results), binds ipc://<run_dir>/host-<seq>.sock and waits for the host's hello.
// Destruction asks the host to shut down, waits briefly, then SIGKILLs and reaps it.
// Used by one thread (RewardScorer's caller).

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

namespace spindle::rewards {

// Why a call got no reply.
struct HostFailure {
  enum class Kind { died, timed_out } kind;
  std::string detail;  // "killed by signal 6 (Aborted)", "no reply within 200 ms"
};

class HostProcess {
 public:
  HostProcess(zmq::context_t& zctx, const std::filesystem::path& binary,
              const std::vector<std::filesystem::path>& plugin_dirs,
              const std::filesystem::path& run_dir, int seq, std::chrono::milliseconds timeout);
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

  zmq::socket_t sock_;
  std::string endpoint_path_;
  pid_t pid_ = -1;
};

}  // namespace spindle::rewards
