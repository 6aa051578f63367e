#pragma once
// Sending one multipart message to a ROUTER peer without ever blocking the front thread. The
// daemon's ROUTERs set ZMQ_ROUTER_MANDATORY, so a message for a peer that is gone fails with
// EHOSTUNREACH (instead of vanishing) and one for a peer whose queue is full fails with EAGAIN
// (instead of blocking or vanishing): the caller learns which and decides (a reply is dropped
// and logged; an event subscription is dropped, or just that event). Both checks happen on the
// first frame (the identity); the remaining frames of an accepted message always go through.
//
// Threading: the thread that owns `router` (the front thread).

#include <span>

#include <zmq.hpp>

namespace spindle::service {

enum class PeerSend { sent, unreachable, would_block };

// parts = [identity][delimiter?][header][frames...].
PeerSend send_to_peer(zmq::socket_t& router, std::span<const zmq::const_buffer> parts);

const char* peer_send_name(PeerSend r);

}  // namespace spindle::service
