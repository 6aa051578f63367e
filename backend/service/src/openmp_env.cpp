// OpenMP wait policy for the daemon (see service.h and docs/decisions.md).

#include <unistd.h>

#include <cstdlib>

#include "spindle/service/service.h"

namespace spindle::service {

void reexec_with_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0) != 0) return;
  ::execv("/proc/self/exe", argv);
  // exec failed: keep running with libgomp's default (spinning) policy.
}

}  // namespace spindle::service
