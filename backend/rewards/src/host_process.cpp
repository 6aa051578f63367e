#include "host_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "host_protocol.h"
#include "proc_tree.h"
#include "spindle/core/error.h"

extern char** environ;

namespace spindle::rewards {

namespace {

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("killed by signal {} ({})", sig, strsignal(sig));
  }
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return fmt::format("ended with wait status {}", status);
}

}  // namespace

HostProcess::HostProcess(zmq::context_t& zctx, const RewardHostOptions& options,
                         const std::filesystem::path& run_dir, int seq)
    : sock_(zctx, zmq::socket_type::pair) {
  const std::filesystem::path& binary = options.host_binary;
  endpoint_path_ = (run_dir / fmt::format("host-{}.sock", seq)).string();
  const std::string endpoint = "ipc://" + endpoint_path_;
  sock_.set(zmq::sockopt::linger, 0);
  sock_.bind(endpoint);

  std::vector<std::string> args = {binary.string(), "--endpoint", endpoint, "--parent-pid",
                                   std::to_string(getpid()), "--memory-limit-mib",
                                   std::to_string(options.memory_limit_mib)};
  for (const auto& d : options.plugin_dirs) {
    args.push_back("--plugin-dir");
    args.push_back(d.string());
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group, led by the host: kill_group()
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  SPINDLE_CHECK(rc == 0, io, "cannot start reward host {}: {}", binary.string(), strerror(rc));
  pid_ = pid;
  pgid_ = pid;
  const std::chrono::milliseconds timeout = options.timeout;

  nlohmann::json hello;
  try {
    // Start-up loads no plugin, but give a slow machine some slack beyond the call timeout.
    hello = receive(std::max(timeout, std::chrono::milliseconds(10000)));
  } catch (const HostFailure& f) {
    SPINDLE_CHECK(f.kind != HostFailure::Kind::memory_limit, resource,
                  "reward host {} cannot start within its memory limit of {} MiB", binary.string(),
                  options.memory_limit_mib);
    SPINDLE_THROW(internal, "reward host {} failed to start: {}", binary.string(), f.detail);
  }
  if (hello.value("op", "") != "hello" ||
      hello.value("protocol", -1) != wire::kHostProtocolVersion) {
    kill_and_reap();
    SPINDLE_THROW(unsupported, "reward host {} speaks another protocol (hello: {}), expected {}",
                  binary.string(), hello.dump(), wire::kHostProtocolVersion);
  }
}

HostProcess::~HostProcess() {
  if (pid_ > 0) {
    try {
      sock_.send(zmq::buffer(wire::encode({{"op", "shutdown"}})), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
    }
    for (int i = 0; i < 100 && pid_ > 0; ++i) {  // up to ~1 s for a clean exit
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) pid_ = -1;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill_and_reap();
  }
  kill_group();  // the host waited for its plugins' processes; this catches a race with one
  std::error_code ec;
  std::filesystem::remove(endpoint_path_, ec);
}

void HostProcess::kill_and_reap() {
  if (pid_ <= 0) return;
  kill_descendants(pid_);  // while the host lives its tree is walkable; the group includes it
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  kill_group();  // what left the tree while it was walked
}

void HostProcess::kill_group() {
  // Called right after the host is reaped, and once: the group id cannot have been reused.
  if (pgid_ > 0) kill(-pgid_, SIGKILL);  // ESRCH: the group is empty
  pgid_ = -1;
}

nlohmann::json HostProcess::receive(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));
    if (item.revents & ZMQ_POLLIN) {
      zmq::message_t msg;
      if (sock_.recv(msg, zmq::recv_flags::dontwait)) return wire::decode(msg.data(), msg.size());
    }
    int status = 0;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      kill_group();  // what the plugin forked, still in the host's group
      if (WIFEXITED(status) && WEXITSTATUS(status) == wire::kHostExitMemoryLimit) {
        throw HostFailure{HostFailure::Kind::memory_limit, describe_status(status)};
      }
      throw HostFailure{HostFailure::Kind::died, describe_status(status)};
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill_and_reap();
      throw HostFailure{HostFailure::Kind::timed_out,
                        fmt::format("no reply within {} ms", timeout.count())};
    }
  }
}

nlohmann::json HostProcess::call(const nlohmann::json& request,
                                 std::chrono::milliseconds timeout) {
  SPINDLE_ASSERT(pid_ > 0);
  if (!sock_.send(zmq::buffer(wire::encode(request)), zmq::send_flags::dontwait)) {
    kill_and_reap();
    throw HostFailure{HostFailure::Kind::died, "the host's socket does not accept messages"};
  }
  return receive(timeout);
}

}  // namespace spindle::rewards
