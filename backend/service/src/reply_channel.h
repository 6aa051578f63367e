#pragma once
// Replies from any thread to the front thread's ROUTERs (STYLE.md 6: only the front thread
// touches a ROUTER). Each replying thread owns one PUSH socket (thread-local, created on its
// first reply, closed when the thread exits) connected to the front's inproc PULL. Message on
// that PUSH: [route][envelope...][reply header][tensor frames...], route = 1 byte socket index
// + 4 bytes LE envelope frame count + 1 byte flags (bit 0: the reply ends its request; a
// stream's non-final messages clear it, so the front counts a stream once, at its end; bit 1:
// the reply is ok, which a worker passes on to its coordinator).
//
// Threading: send() is safe from any thread that exits before the context is closed (the
// daemon joins every such thread first).

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/logger.h>
#include <zmq.hpp>

#include "reply_counters.h"
#include "spindle/protocol/wire.h"

namespace spindle::service {

// The route socket index of an event for the PUB socket (never a ROUTER index).
inline constexpr uint8_t kPublishRoute = 0xff;
// The cluster socket (cluster_wire.h): the coordinator's cluster ROUTER, or a worker's DEALER
// to its coordinator. A Call on it is a forwarded request (a worker's) or a raw message.
inline constexpr uint8_t kClusterRoute = 0xfe;
// No message: wakes the front thread to take what was posted for it (cluster_state.h).
inline constexpr uint8_t kWakeRoute = 0xfd;

// Who a reply goes to: the request's route and the header fields a reply echoes.
struct Call {
  uint8_t socket = 0;                  // index of the ROUTER the request came in on
  std::vector<std::string> envelope;   // identity frames (+ empty delimiter, if any)
  protocol::Encoding encoding = protocol::Encoding::binary;
  uint64_t request_id = 0;
  protocol::Op op = protocol::Op::handshake;
  std::string tenant;                  // "" until authenticated
};

class ReplyChannel {
 public:
  // `log` (may be null) gets one line per error reply (encode_counted).
  ReplyChannel(zmq::context_t& context, std::string endpoint,
               std::shared_ptr<spdlog::logger> log = nullptr)
      : context_(context), endpoint_(std::move(endpoint)), log_(std::move(log)) {}
  const std::string& endpoint() const { return endpoint_; }

  void ok(const Call& call, protocol::ReplyBody body, protocol::Frames frames = {});
  void error(const Call& call, std::string code, std::string message);
  void overloaded(const Call& call, uint64_t depth, uint64_t limit, uint32_t retry_after_ms);
  // Sends a built reply (encoded on the calling thread). A stream's message with
  // final == false (protocol::is_final_reply) leaves the request in flight.
  void send(const Call& call, const protocol::Reply& reply);
  // Hands an event to the front thread, which publishes [topic][header] on the PUB socket.
  // Route: socket index kPublishRoute, no envelope.
  void publish(const std::string& topic, const protocol::Reply& event);
  // Frames for the front thread to send as they are on the socket `socket` (kClusterRoute).
  void send_raw(uint8_t socket, const std::vector<std::string>& frames);
  // Wakes the front thread (route kWakeRoute, no frames).
  void wake();

  // Replies sent by any path (this channel and the front's direct sends), ok and errors.
  std::atomic<uint64_t> served{0};
  std::atomic<uint64_t> failed{0};
  // Requests answered by op and code, by the same paths (reply_counters.h).
  ReplyCounters counters;

  // What every reply path does before it sends: encodes `reply`'s header into `header` or, when
  // it cannot be encoded, an `internal` error's (no frames, final), made in `fallback`; a header
  // over the protocol's max_header_bytes (what clients decode with) is replaced the same way by
  // a `limit_exceeded` error. Counts what goes out (served / failed and `counters`). Returns the
  // reply actually sent. Every error reply is logged here, once, with its request id, op,
  // tenant, code and message (the one place every reply path passes): internal and data_loss
  // at error level, resource_exhausted, overloaded and unavailable at warn, the rest (the
  // client's own mistakes) at info.
  const protocol::Reply& encode_counted(const Call& call, const protocol::Reply& reply,
                                        protocol::Reply& fallback, std::string& header);

 private:
  void log_error_reply(const Call& call, const protocol::Reply& reply) const;

  zmq::context_t& context_;
  std::string endpoint_;
  std::shared_ptr<spdlog::logger> log_;
};

// The reply for `call` (ok with body/frames).
protocol::Reply make_ok(const Call& call, protocol::ReplyBody body, protocol::Frames frames);
protocol::Reply make_error(const Call& call, std::string code, std::string message);

// Closes the calling thread's PUSH, if it has one. A thread that outlives the context (the
// main thread running the front) must call it before the context is closed.
void close_thread_push();

// Route frame for the PUSH message, and its parse (false when malformed).
struct Route {
  uint8_t socket = 0;
  uint32_t envelope_frames = 0;
  bool final = true;  // the reply ends its request (see the top of this file)
  bool ok = true;     // flags bit 1: the reply is not an error
};
std::string encode_route(const Route& route);
std::optional<Route> decode_route(const std::string& frame);

}  // namespace spindle::service
