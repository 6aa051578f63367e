#pragma once
// Training and sampling operations. Called on the front thread for requests already counted
// in flight: each sends exactly one reply through d.replies, from whichever thread finishes it
// (front, catalog or the scheduler's engine thread), except sample_stream, which sends
// non-final messages from the engine thread and then exactly one final reply (or an error).
//
// Ordering: a session's forward/forward_backward/optim_step/save_* are submitted to the
// scheduler from the front thread in arrival order, so they run in that order. load_state
// reads the revision on the catalog thread first; requests sent after it without waiting for
// its reply may run before it.

#include "daemon_state.h"

namespace spindle::service {

void dispatch_training_op(Daemon& d, Call call, protocol::Request request);
void dispatch_sampling_op(Daemon& d, Call call, protocol::Request request);

}  // namespace spindle::service
