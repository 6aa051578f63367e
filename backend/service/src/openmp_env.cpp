// OpenMP wait policy for the daemon (see service.h and docs/decisions.md).

#include <unistd.h>

#include <cstdlib>

#include "spindle/service/service.h"

namespace spindle::service {

void reexec_with_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0) != 0) return;
  // Through the executable's real path, so that the new image keeps its name (a process
  // exec'ed as /proc/self/exe is named "exe": pgrep spindled would not find it); through the
  // link when the path is gone (replaced by an upgrade: "(deleted)").
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    ::execv(self, argv);
  }
  ::execv("/proc/self/exe", argv);
  // exec failed: keep running with libgomp's default (spinning) policy.
}

}  // namespace spindle::service
