#pragma once
// Processes a reward plugin started, found through /proc (this kernel family may lack
// CONFIG_PROC_CHILDREN, so /proc/<pid>/task/<tid>/children is not relied on): every
// /proc/<pid>/stat is read for its parent pid. One scan costs about a millisecond per thousand
// processes on the machine. Used by the host after each request (its own children; the host is
// a child subreaper, so a plugin's orphans stay its children) and by the scorer before it kills
// a host (the host's whole tree). Linux only.

#include <sys/types.h>

#include <vector>

namespace spindle::rewards {

// The live (or not yet reaped) children of `parent`.
std::vector<pid_t> child_pids(pid_t parent);

// Every descendant of `root`, `root` excluded, parents before their children.
std::vector<pid_t> descendant_pids(pid_t root);

// SIGKILLs `root`'s descendants (stopped first, so none forks while the tree is walked), then
// the process group `root` leads, `root` included. Reaps nothing: the descendants are reaped by
// their parents (or init); reap `root` yourself.
void kill_descendants(pid_t root);

}  // namespace spindle::rewards
