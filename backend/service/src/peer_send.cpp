#include "peer_send.h"

namespace spindle::service {

PeerSend send_to_peer(zmq::socket_t& router, std::span<const zmq::const_buffer> parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto flags = i + 1 < parts.size() ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                            : zmq::send_flags::dontwait;
    try {
      if (!router.send(parts[i], flags)) {
        // EAGAIN can only come on the first frame (see the header); later frames of an
        // accepted message are queued whatever the high-water mark.
        return PeerSend::would_block;
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) return PeerSend::unreachable;
      throw;
    }
  }
  return PeerSend::sent;
}

const char* peer_send_name(PeerSend r) {
  switch (r) {
    case PeerSend::sent: return "sent";
    case PeerSend::unreachable: return "peer gone";
    case PeerSend::would_block: return "peer's queue full";
  }
  return "?";
}

}  // namespace spindle::service
