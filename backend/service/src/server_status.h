#pragma once
// The server's status figures (the `status` op's reply, before AdapterOwners::for_tenant
// filters its placements), computed from thread-safe sources only: each base's scheduler stats
// snapshot (`stats[i]` is d.bases[i]'s), host cache and loader stats, the session table and the reply channel's
// counters. The front thread's own figures (requests in flight, token rate) come in as arguments,
// so this is callable from any thread once the daemon's engine and reply channel exist (the front
// thread for `status`, the metrics thread for /metrics).

#include <cstdint>
#include <span>
#include <vector>

#include "daemon_state.h"
#include "spindle/protocol/messages.h"
#include "spindle/scheduler/scheduler.h"

namespace spindle::service {

// The top-level figures sum over the bases (device, dtype and device memory are the first
// base's; hit rates and load wait are the mean of the bases'); `bases` has one entry each.
protocol::StatusReply server_status(const Daemon& d, std::span<const scheduler::SchedulerStats> stats,
                                    uint64_t queue_depth, double tokens_per_s);
// Every base's scheduler stats, in d.bases order.
std::vector<scheduler::SchedulerStats> scheduler_stats(const Daemon& d);

}  // namespace spindle::service
