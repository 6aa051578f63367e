#pragma once
// The server's status figures (the `status` op's reply, before AdapterOwners::for_tenant
// filters its placements), computed from thread-safe sources only: the scheduler's stats
// snapshot `st`, the host cache's and loader's stats, the session table and the reply channel's
// counters. The front thread's own figures (requests in flight, token rate) come in as arguments,
// so this is callable from any thread once the daemon's engine and reply channel exist (the front
// thread for `status`, the metrics thread for /metrics).

#include <cstdint>

#include "daemon_state.h"
#include "spindle/protocol/messages.h"
#include "spindle/scheduler/scheduler.h"

namespace spindle::service {

protocol::StatusReply server_status(const Daemon& d, const scheduler::SchedulerStats& st,
                                    uint64_t queue_depth, double tokens_per_s);

}  // namespace spindle::service
