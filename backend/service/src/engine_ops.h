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

// Closes the sessions whose lease ran out (front thread, about once a second). A coordinator
// closes its remote sessions on their workers; a worker keeps its sessions (the coordinator
// holds their leases).
void close_expired_sessions(Daemon& d);

// Submits a sampling request (sample, sample_stream, compute_logprobs) whose address is
// resolved to `adapter` to its base's scheduler: a standalone daemon's, or a worker's for a
// forwarded one.
void submit_sampling(Daemon& d, const Call& call, const protocol::Request& request,
                     const ResolvedAdapter& adapter);

// A worker: a `sample` request on training session `session_id`'s live weights (forward kind
// session_sample, a coordinator's GRPO run); replies SampleReply.
void submit_session_sampling(Daemon& d, const Call& call, const protocol::Request& request,
                             const std::string& session_id);

// The completions of an ok SampleReply (a worker's, decoded on the coordinator).
std::vector<engine::Completion> completions_of(const protocol::Reply& reply);

// A worker: the session forwards that are not plain requests (open, load, snapshot;
// cluster_wire.h), for the coordinator's session header.session_id.
void dispatch_forwarded_session(Daemon& d, const Call& call,
                                const cluster_wire::ForwardHeader& header);

// A request as a coordinator forwards it: its header frame (no token) and its tensor frames.
protocol::Frames encode_forwarded(protocol::Request request);

// A coordinator's forward of a sampling request resolved to `adapter`, placed by `key`
// (tenant/policy, or base:tenant for the bare base) like any sampling of that policy; the caller
// sets f.done (null relays every reply to f.call).
Forward sampling_forward(const Call& call, const ResolvedAdapter& adapter, std::string key,
                         protocol::Request request);

// A worker: a forwarded request (cluster_wire.h), already counted in flight; replies through
// d.replies to the call's cluster route.
void dispatch_forwarded(Daemon& d, Call call, protocol::Request request,
                        cluster_wire::ForwardHeader header);

}  // namespace spindle::service
