// Test plugin: fork()s while scoring (once per call, on the first item). config "mode":
//   "clean"   the child exits, the parent waits for it (allowed: scores 1);
//   "linger"  the child sleeps forever, the parent returns without waiting;
//   "orphan"  the child starts a grandchild in a new session and exits, the parent waits for
//             the child only: the grandchild is orphaned, sleeping forever;
//   "return"  both sides of fork() return from score() (the child would run on in the host);
//   "wait"    the child sleeps forever and the parent waits for it: the call hangs.
// Every process it starts appends its pid to config "pid_file" (when given), one per line.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <spindle/reward_plugin.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <string>

namespace {

// Appends this process's pid to `file`, then writes one byte to `ready` (a pipe whose reader
// waits for it: nothing is killed before its pid is on record).
void note_pid(const std::string& file, int ready) {
  if (!file.empty()) {
    const std::string line = std::to_string(getpid()) + "\n";
    const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      [[maybe_unused]] const ssize_t n = write(fd, line.data(), line.size());
      close(fd);
    }
  }
  [[maybe_unused]] const ssize_t n = write(ready, "x", 1);
}

void wait_ready(int ready) {
  char c;
  while (read(ready, &c, 1) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void sleep_forever() {
  for (;;) pause();
}

struct Fork {
  explicit Fork(const std::string& config) {
    const nlohmann::json j = nlohmann::json::parse(config);
    mode_ = j.value("mode", "clean");
    pid_file_ = j.value("pid_file", "");
  }
  spindle::reward_sdk::Score score(const spindle::reward_sdk::Item&) {
    if (forked_) return {1.0, ""};
    forked_ = true;
    int ready[2];
    if (pipe(ready) != 0) throw std::runtime_error("pipe failed");
    const pid_t child = fork();
    if (child < 0) throw std::runtime_error("fork failed");
    if (child == 0) {
      if (mode_ == "orphan") {
        setsid();
        int grandchild_ready[2];
        if (pipe(grandchild_ready) != 0) _exit(1);
        if (fork() == 0) {
          note_pid(pid_file_, grandchild_ready[1]);
          sleep_forever();
        }
        wait_ready(grandchild_ready[0]);  // the grandchild's pid is on record before ours
      }
      note_pid(pid_file_, ready[1]);
      if (mode_ == "clean" || mode_ == "orphan") _exit(0);
      if (mode_ == "return") return {1.0, "child"};
      sleep_forever();  // linger, wait
    }
    wait_ready(ready[0]);
    close(ready[0]);
    close(ready[1]);
    if (mode_ != "linger" && mode_ != "return") {
      int status = 0;
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
    }
    return {1.0, ""};
  }
  std::string mode_, pid_file_;
  bool forked_ = false;
};

}  // namespace

SPINDLE_REWARD_PLUGIN(Fork, "fork", "test: forks while scoring",
                      R"({"type": "object", "properties": {
                            "mode": {"enum": ["clean", "linger", "orphan", "return", "wait"]},
                            "pid_file": {"type": "string"}},
                          "additionalProperties": false})")
