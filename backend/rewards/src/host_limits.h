#pragma once
// Containment inside spindle-reward-host (host_protocol.h "Containment"); run_reward_host calls
// these, in this order, before it serves.

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace spindle::rewards {

// Caps the address space at `mib` MiB (RLIMIT_AS; 0 = no cap, nothing installed) and makes
// reaching it end the process with wire::kHostExitMemoryLimit: an operator new that fails (a
// new_handler, so a plugin cannot catch the bad_alloc and carry on at the limit), and a SIGSEGV
// or SIGBUS while the address space is within 1/8 of the cap (a C plugin that used the NULL
// malloc returned; handled on an alternate stack, so a stack that could not grow is caught too).
// Returns false, changing nothing, when this build runs under a sanitizer: ASan and TSan reserve
// terabytes of shadow address space, which no cap leaves room for.
bool apply_memory_limit(int64_t mib);

// True when the address space is within 1/8 of the cap (false without a cap).
bool near_memory_limit();

// Writes the limit and `why` to stderr and _exit()s with wire::kHostExitMemoryLimit.
// Async-signal-safe.
[[noreturn]] void exit_memory_limit(const char* why);

// Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): a process a plugin starts stays
// this process's descendant even after its own parent exits, so leftover_children() sees it.
void become_subreaper();

// Kills (SIGKILL) and reaps every child of this process until none is left (a dying child's
// children are reparented here, so the loop takes the whole tree). Returns the children found,
// running or exited but not waited for; empty when the plugin waited for everything it started.
std::vector<pid_t> kill_leftover_children();

}  // namespace spindle::rewards
