#include "reply_channel.h"

#include <memory>

namespace spindle::service {
namespace {

// One PUSH per (thread, channel endpoint); closed at thread exit, before the daemon closes
// the context (it joins every replying thread first).
struct ThreadPush {
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> socket;
};
thread_local ThreadPush t_push;

zmq::socket_t& push_for(zmq::context_t& context, const std::string& endpoint) {
  if (!t_push.socket || t_push.endpoint != endpoint) {
    t_push.socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::push);
    t_push.socket->set(zmq::sockopt::linger, 1000);
    t_push.socket->connect(endpoint);
    t_push.endpoint = endpoint;
  }
  return *t_push.socket;
}

}  // namespace

void close_thread_push() {
  t_push.socket.reset();
  t_push.endpoint.clear();
}

std::string encode_route(const Route& route) {
  std::string r(6, '\0');
  r[0] = char(route.socket);
  for (int i = 0; i < 4; ++i) r[size_t(1 + i)] = char((route.envelope_frames >> (8 * i)) & 0xff);
  r[5] = char((route.final ? 1 : 0) | (route.ok ? 2 : 0));
  return r;
}

std::optional<Route> decode_route(const std::string& frame) {
  if (frame.size() != 6) return std::nullopt;
  Route route;
  route.socket = uint8_t(frame[0]);
  for (int i = 0; i < 4; ++i) {
    route.envelope_frames |= uint32_t(uint8_t(frame[size_t(1 + i)])) << (8 * i);
  }
  route.final = (uint8_t(frame[5]) & 1) != 0;
  route.ok = (uint8_t(frame[5]) & 2) != 0;
  return route;
}

protocol::Reply make_ok(const Call& call, protocol::ReplyBody body, protocol::Frames frames) {
  protocol::Reply r;
  r.encoding = call.encoding;
  r.request_id = call.request_id;
  r.op = call.op;
  r.ok = true;
  r.body = std::move(body);
  r.frames = std::move(frames);
  return r;
}

protocol::Reply make_error(const Call& call, std::string code, std::string message) {
  return protocol::make_error_reply(call.encoding, call.request_id, call.op, std::move(code),
                                    std::move(message));
}

void ReplyChannel::ok(const Call& call, protocol::ReplyBody body, protocol::Frames frames) {
  send(call, make_ok(call, std::move(body), std::move(frames)));
}

void ReplyChannel::error(const Call& call, std::string code, std::string message) {
  send(call, make_error(call, std::move(code), std::move(message)));
}

void ReplyChannel::overloaded(const Call& call, uint64_t depth, uint64_t limit,
                              uint32_t retry_after_ms) {
  protocol::Reply r = make_error(call, protocol::errc::overloaded,
                                 "server overloaded: retry later");
  r.error.queue_depth = depth;
  r.error.queue_limit = limit;
  r.error.retry_after_ms = retry_after_ms;
  send(call, r);
}

const protocol::Reply& ReplyChannel::encode_counted(const Call& call, const protocol::Reply& reply,
                                                    protocol::Reply& fallback,
                                                    std::string& header) {
  const protocol::Reply* sent = &reply;
  try {
    header = protocol::encode_reply_header(reply);
    // Clients decode with the protocol's limits (PROTOCOL.md 6): a header they would refuse is
    // never sent.
    const uint64_t limit = protocol::Limits{}.max_header_bytes;
    if (header.size() - 1 > limit) {
      fallback = make_error(call, protocol::errc::limit_exceeded,
                            "the reply header would be " + std::to_string(header.size() - 1) +
                                " bytes, limit " + std::to_string(limit) +
                                " (max_header_bytes): ask for less at once");
      header = protocol::encode_reply_header(fallback);
      sent = &fallback;
    }
  } catch (const std::exception& e) {
    fallback = make_error(call, protocol::errc::internal,
                          std::string("cannot encode reply: ") + e.what());
    header = protocol::encode_reply_header(fallback);
    sent = &fallback;
  }
  (sent->ok ? served : failed).fetch_add(1, std::memory_order_relaxed);
  counters.count(*sent);
  if (!sent->ok) log_error_reply(call, *sent);
  return *sent;
}

void ReplyChannel::log_error_reply(const Call& call, const protocol::Reply& reply) const {
  if (!log_) return;
  namespace errc = protocol::errc;
  const std::string& code = reply.error.code;
  spdlog::level::level_enum level = spdlog::level::info;
  if (code == errc::internal || code == errc::data_loss) {
    level = spdlog::level::err;
  } else if (code == errc::resource_exhausted || code == errc::overloaded ||
             code == errc::unavailable) {
    level = spdlog::level::warn;
  }
  if (!log_->should_log(level)) return;
  log_->log(level, "request {} ({}) on socket {}{} answered {}: {}", call.request_id,
            protocol::op_name(call.op), call.socket,
            call.tenant.empty() ? std::string() : " tenant " + call.tenant, code,
            reply.error.message);
}

void ReplyChannel::send(const Call& call, const protocol::Reply& reply) {
  protocol::Reply fallback;
  std::string header;
  const protocol::Reply* sent = &encode_counted(call, reply, fallback, header);
  zmq::socket_t& push = push_for(context_, endpoint_);
  const Route route{call.socket, uint32_t(call.envelope.size()), protocol::is_final_reply(*sent),
                    sent->ok};
  push.send(zmq::buffer(encode_route(route)), zmq::send_flags::sndmore);
  for (const auto& f : call.envelope) push.send(zmq::buffer(f), zmq::send_flags::sndmore);
  const protocol::Frames& frames = sent->frames;
  push.send(zmq::buffer(header), frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  for (size_t i = 0; i < frames.size(); ++i) {
    push.send(zmq::buffer(frames[i]),
              i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

void ReplyChannel::publish(const std::string& topic, const protocol::Reply& event) {
  const std::string header = protocol::encode_reply_header(event);
  zmq::socket_t& push = push_for(context_, endpoint_);
  push.send(zmq::buffer(encode_route({kPublishRoute, 0, true})), zmq::send_flags::sndmore);
  push.send(zmq::buffer(topic), zmq::send_flags::sndmore);
  push.send(zmq::buffer(header), zmq::send_flags::none);
}

void ReplyChannel::send_raw(uint8_t socket, const std::vector<std::string>& frames) {
  zmq::socket_t& push = push_for(context_, endpoint_);
  push.send(zmq::buffer(encode_route({socket, 0, true, true})),
            frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  for (size_t i = 0; i < frames.size(); ++i) {
    push.send(zmq::buffer(frames[i]),
              i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

void ReplyChannel::wake() {
  zmq::socket_t& push = push_for(context_, endpoint_);
  push.send(zmq::buffer(encode_route({kWakeRoute, 0, true, true})), zmq::send_flags::none);
}

}  // namespace spindle::service
