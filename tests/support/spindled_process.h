#pragma once
// A real `spindled` child process for tests and benchmarks: started with fork/exec, its stdout
// read until the "spindled ready: <endpoints>" line, stderr to <data_dir>/stderr. No gtest here,
// so spindle-bench uses it too.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace spindle::testing {

class SpindledProcess {
 public:
  // Runs `binary --data-dir <data_dir> <args...>` and waits up to ready_timeout_s for the ready
  // line; throws runtime_error with the process's stderr when it does not come.
  SpindledProcess(const std::filesystem::path& binary, const std::filesystem::path& data_dir,
                  const std::vector<std::string>& args, int ready_timeout_s)
      : data_dir_(data_dir) {
    std::filesystem::create_directories(data_dir);
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> argv_s = {binary.string(), "--data-dir", data_dir.string()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      const int err = ::open((data_dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(err, 2);
      ::close(out[0]);
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_fd_ = out[0];
    std::string buf;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(ready_timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char c[512];
      const ssize_t n = ::read(out_fd_, c, sizeof c);
      if (n <= 0) break;
      buf.append(c, size_t(n));
      const auto at = buf.find("spindled ready: ");
      const auto nl = at == std::string::npos ? std::string::npos : buf.find('\n', at);
      if (nl != std::string::npos) {
        std::istringstream ss(buf.substr(at + 16, nl - at - 16));
        for (std::string e; ss >> e;) endpoints_.push_back(e);
        return;
      }
    }
    kill_now();
    std::ifstream e(data_dir / "stderr");
    std::stringstream s;
    s << e.rdbuf();
    throw std::runtime_error("spindled did not become ready; stderr:\n" + s.str());
  }

  ~SpindledProcess() {
    kill_now();
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  SpindledProcess(const SpindledProcess&) = delete;
  SpindledProcess& operator=(const SpindledProcess&) = delete;

  pid_t pid() const { return pid_; }

  // SIGTERM, then the exit code (-1 when killed by a signal or still running after 60 s).
  int terminate() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 600; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      ::usleep(100000);
    }
    return -1;
  }

  // SIGKILL now (a crash: no drain, no cleanup) and reap the process. Safe from another thread
  // while a client is talking to the daemon.
  void kill_now() {
    const pid_t pid = pid_;
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid_ = -1;
  }

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  const std::filesystem::path& data_dir() const { return data_dir_; }
  // The token spindled wrote to <data_dir>/token on first start.
  std::string token() const {
    std::ifstream in(data_dir_ / "token");
    std::string t;
    in >> t;
    return t;
  }

 private:
  std::filesystem::path data_dir_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::vector<std::string> endpoints_;
};

}  // namespace spindle::testing
