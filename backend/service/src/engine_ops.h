#pragma once
// Training and sampling operations. Called on the front thread for requests already counted
// in flight: each sends exactly one reply through d.replies, from whichever thread finishes it
// (front, catalog or the scheduler's engine thread), except sample_stream, which sends
// non-final messages from the engine thread and then exactly one final reply (or an error).
//
// Ordering: a session's requests run in arrival order. forward/forward_backward/optim_step/
// save_*/close are submitted to the scheduler from the front thread in arrival order;
// load_state reads the revision on the catalog thread first, and the session's requests that
// arrive meanwhile wait behind it (SessionTable's gate) and are submitted after it.

#include "daemon_state.h"

namespace spindle::service {

void dispatch_training_op(Daemon& d, Call call, protocol::Request request);
void dispatch_sampling_op(Daemon& d, Call call, protocol::Request request);

// Closes the sessions whose lease ran out (front thread, about once a second).
void close_expired_sessions(Daemon& d);

}  // namespace spindle::service
