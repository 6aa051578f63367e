#include "host_limits.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "host_protocol.h"
#include "proc_tree.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPINDLE_HOST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define SPINDLE_HOST_SANITIZED 1
#endif
#endif

namespace spindle::rewards {

namespace {

// Set once by apply_memory_limit, before any plugin runs; read by the handlers below.
uint64_t g_limit_bytes = 0;
uint64_t g_page_bytes = 4096;
char g_message[192];
size_t g_message_len = 0;
// The alternate signal stack: static, since the heap may be what ran out.
alignas(16) char g_signal_stack[64 * 1024];

// The address space from /proc/self/statm (its first field, in pages). Async-signal-safe.
uint64_t address_space_bytes() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[64];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  uint64_t pages = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i)
    pages = pages * 10 + uint64_t(buf[i] - '0');
  return pages * g_page_bytes;
}

bool near(uint64_t bytes) {
  return g_limit_bytes > 0 && bytes + g_limit_bytes / 8 >= g_limit_bytes;
}

void on_new_failure() {
  exit_memory_limit("operator new failed");
}

// SA_RESETHAND restored the default action: re-raising (or returning to the faulting
// instruction) ends the process by the signal, as without a handler.
void on_fault(int sig) {
  if (near(address_space_bytes())) {
    exit_memory_limit(sig == SIGSEGV ? "SIGSEGV near the limit" : "SIGBUS near the limit");
  }
  ::raise(sig);
}

}  // namespace

bool apply_memory_limit(int64_t mib) {
  if (mib <= 0) return true;
#ifdef SPINDLE_HOST_SANITIZED
  std::fprintf(stderr,
               "spindle-reward-host: sanitizer build: the memory limit of %lld MiB is not applied "
               "(the sanitizer's shadow memory needs the address space)\n",
               static_cast<long long>(mib));
  return false;
#else
  g_page_bytes = uint64_t(::sysconf(_SC_PAGESIZE));
  g_limit_bytes = uint64_t(mib) << 20;
  const int len = std::snprintf(g_message, sizeof(g_message),
                                "spindle-reward-host: memory limit of %lld MiB reached (address "
                                "space, RLIMIT_AS): ",
                                static_cast<long long>(mib));
  g_message_len = len > 0 ? std::min(size_t(len), sizeof(g_message) - 1) : 0;
  const struct rlimit cap = {rlim_t(g_limit_bytes), rlim_t(g_limit_bytes)};
  if (::setrlimit(RLIMIT_AS, &cap) != 0) {
    std::fprintf(stderr, "spindle-reward-host: setrlimit(RLIMIT_AS, %lld MiB) failed\n",
                 static_cast<long long>(mib));
    exit_memory_limit("setrlimit failed");
  }
  std::set_new_handler(on_new_failure);
  stack_t ss{};
  ss.ss_sp = g_signal_stack;
  ss.ss_size = sizeof(g_signal_stack);
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fault;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGSEGV, &sa, nullptr);
  ::sigaction(SIGBUS, &sa, nullptr);
  return true;
#endif
}

bool near_memory_limit() {
  return near(address_space_bytes());
}

void exit_memory_limit(const char* why) {
  if (g_message_len > 0) {
    [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, g_message, g_message_len);
    w = ::write(STDERR_FILENO, why, std::strlen(why));
    w = ::write(STDERR_FILENO, "; exiting\n", 10);
  }
  ::_exit(wire::kHostExitMemoryLimit);
}

void become_subreaper() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

std::vector<pid_t> kill_leftover_children() {
  std::vector<pid_t> found;
  auto note = [&](pid_t p) {
    if (std::find(found.begin(), found.end(), p) == found.end()) found.push_back(p);
  };
  for (int round = 0; round < 64; ++round) {
    int status = 0;
    pid_t p;
    while ((p = ::waitpid(-1, &status, WNOHANG)) > 0) note(p);  // exited, never waited for
    if (p < 0 && errno == ECHILD) break;  // no children at all: the usual case, no /proc scan
    const std::vector<pid_t> live = child_pids(::getpid());
    if (live.empty()) break;
    for (pid_t c : live) {
      note(c);
      ::kill(c, SIGKILL);
    }
    for (pid_t c : live) {
      while (::waitpid(c, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  return found;
}

}  // namespace spindle::rewards
