#include "proc_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace spindle::rewards {

namespace {

// The parent pid in /proc/<pid>/stat ("pid (comm) state ppid ..."; comm may hold spaces and
// parentheses, so parse after the last ')'); -1 when the process is gone.
pid_t parent_of(const char* pid_text) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%s/stat", pid_text);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  if (!close_paren || close_paren[1] != ' ' || close_paren[2] == '\0') return -1;
  return pid_t(std::strtol(close_paren + 4, nullptr, 10));  // skip ") S "
}

// pid -> parent pid of every process visible in /proc.
std::multimap<pid_t, pid_t> children_by_parent() {
  std::multimap<pid_t, pid_t> out;
  DIR* dir = ::opendir("/proc");
  if (!dir) return out;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const pid_t parent = parent_of(e->d_name);
    if (parent > 0) out.emplace(parent, pid_t(std::strtol(e->d_name, nullptr, 10)));
  }
  ::closedir(dir);
  return out;
}

}  // namespace

std::vector<pid_t> child_pids(pid_t parent) {
  std::vector<pid_t> out;
  const auto all = children_by_parent();
  for (auto [it, end] = all.equal_range(parent); it != end; ++it) out.push_back(it->second);
  return out;
}

std::vector<pid_t> descendant_pids(pid_t root) {
  const auto all = children_by_parent();
  std::vector<pid_t> out;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty() && out.size() < 100000) {
    const pid_t p = frontier.back();
    frontier.pop_back();
    for (auto [it, end] = all.equal_range(p); it != end; ++it) {
      if (std::find(out.begin(), out.end(), it->second) != out.end()) continue;
      out.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  return out;
}

void kill_descendants(pid_t root) {
  // Stop the tree until a walk finds nothing new (a process forking between two walks is
  // caught by the next), then kill what was stopped.
  std::vector<pid_t> stopped;
  for (int round = 0; round < 20; ++round) {
    bool fresh = false;
    for (pid_t p : descendant_pids(root)) {
      if (std::find(stopped.begin(), stopped.end(), p) != stopped.end()) continue;
      ::kill(p, SIGSTOP);
      stopped.push_back(p);
      fresh = true;
    }
    if (!fresh) break;
  }
  for (pid_t p : stopped) ::kill(p, SIGKILL);
  ::kill(-root, SIGKILL);  // what left the tree but not the group (its parent already died)
}

}  // namespace spindle::rewards
