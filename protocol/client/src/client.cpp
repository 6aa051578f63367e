// Client transport: one DEALER socket, request ids, the overloaded retry loop.

#include "spindle/protocol/client.h"

#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <set>
#include <thread>

#include "spindle/protocol/curve.h"

namespace spindle::protocol {

using Clock = std::chrono::steady_clock;

struct Client::Impl {
  ClientOptions options;
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  uint64_t next_id = 1;
  std::set<uint64_t> pending;  // ids from send() whose reply receive() has not returned
  std::deque<Reply> ready;     // replies to send() that arrived while call() waited
  HandshakeReply server;

  void send_raw(uint64_t id, Op op, const RequestBody& body, const Frames& frames) {
    Request r;
    r.encoding = options.encoding;
    r.request_id = id;
    r.token = options.token;
    r.op = op;
    r.body = body;
    std::string header;
    try {
      header = encode_request_header(r);
    } catch (const ProtocolError& e) {
      throw ClientError(e.code(), e.what(), id);
    }
    try {
      const auto more = frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
      if (!socket.send(zmq::buffer(header), more))
        throw ClientError("timeout", "send of request " + std::to_string(id) + " timed out", id);
      for (size_t i = 0; i < frames.size(); ++i) {
        const auto flag = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        if (!socket.send(zmq::buffer(frames[i]), flag))
          throw ClientError("timeout", "send of request " + std::to_string(id) + " timed out", id);
      }
    } catch (const zmq::error_t& e) {
      throw ClientError("transport", e.what(), id);
    }
  }

  // One reply from the socket within `timeout_ms`, decoded; nullopt on timeout.
  std::optional<Reply> read_one(int timeout_ms) {
    std::vector<std::string> parts;
    try {
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(std::max(0, timeout_ms))) == 0)
        return std::nullopt;
      do {
        zmq::message_t m;
        if (!socket.recv(m, zmq::recv_flags::dontwait)) break;
        parts.emplace_back(m.to_string());
        if (!m.more()) break;
      } while (true);
    } catch (const zmq::error_t& e) {
      throw ClientError("transport", e.what());
    }
    // A server that answers with a REQ-style empty delimiter: drop it.
    if (parts.size() > 1 && parts[0].empty()) parts.erase(parts.begin());
    try {
      return decode_reply(parts);
    } catch (const ProtocolError& e) {
      throw ClientError(e.code(), std::string("malformed reply: ") + e.what(), e.request_id);
    }
  }

  static int remaining_ms(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return int(std::max<int64_t>(0, left.count()));
  }

  // Waits for the reply to `id`; other replies to send() are kept, stale ones dropped.
  std::optional<Reply> wait_for(uint64_t id, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    do {
      std::optional<Reply> r = read_one(remaining_ms(deadline));
      if (!r) return std::nullopt;
      if (r->request_id == id) return r;
      if (pending.count(r->request_id)) ready.push_back(std::move(*r));
    } while (remaining_ms(deadline) > 0);
    return std::nullopt;
  }
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  const ClientOptions& o = impl_->options;
  try {
    zmq::socket_t& s = impl_->socket;
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::sndtimeo, o.timeout_ms);
    if (!o.server_public_key.empty()) {
      CurveKeyPair mine{o.client_public_key, o.client_secret_key};
      if (mine.secret_key.empty()) mine = curve_keypair();
      if (mine.public_key.empty()) mine.public_key = curve_public_key(mine.secret_key);
      s.set(zmq::sockopt::curve_serverkey, o.server_public_key);
      s.set(zmq::sockopt::curve_publickey, mine.public_key);
      s.set(zmq::sockopt::curve_secretkey, mine.secret_key);
    }
    s.connect(o.endpoint);
  } catch (const zmq::error_t& e) {
    throw ClientError("transport", o.endpoint + ": " + e.what());
  } catch (const std::runtime_error& e) {
    throw ClientError("invalid_argument", e.what());
  }
  const Reply r = call(Op::handshake, HandshakeRequest{o.client_name});
  impl_->server = std::get<HandshakeReply>(r.body);
}

Client::~Client() = default;

const HandshakeReply& Client::server() const { return impl_->server; }
const ClientOptions& Client::options() const { return impl_->options; }

namespace {

// PROTOCOL.md "Unavailable": the ops that change nothing on the server are resent after
// `unavailable` (a cluster worker lost mid-request), every 100 ms, at most 20 times.
constexpr int kUnavailableRetries = 20;
bool resend_on_unavailable(Op op) {
  return op == Op::sample || op == Op::compute_logprobs || op == Op::reward_test;
}

}  // namespace

Reply Client::call(Op op, RequestBody body, Frames frames) {
  Impl& m = *impl_;
  int unavailable = 0;
  for (int attempt = 0;; ++attempt) {
    const uint64_t id = m.next_id++;
    m.send_raw(id, op, body, frames);
    std::optional<Reply> r = m.wait_for(id, m.options.timeout_ms);
    if (!r)
      throw ClientError("timeout",
                        std::string("no reply to ") + op_name(op) + " (request " +
                            std::to_string(id) + ") within " +
                            std::to_string(m.options.timeout_ms) + " ms",
                        id);
    if (r->ok) return std::move(*r);
    if (r->error.code == errc::overloaded && attempt < m.options.max_overloaded_retries) {
      const uint32_t wait = std::max<uint32_t>(1, r->error.retry_after_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait));
      continue;
    }
    if (r->error.code == errc::unavailable && resend_on_unavailable(op) &&
        unavailable++ < kUnavailableRetries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    throw ClientError(r->error.code, r->error.message, id);
  }
}

Reply Client::call_stream(Op op, RequestBody body, Frames frames,
                          const std::function<void(const Reply&)>& on_message) {
  Impl& m = *impl_;
  for (int attempt = 0;; ++attempt) {
    const uint64_t id = m.next_id++;
    m.send_raw(id, op, body, frames);
    for (;;) {
      std::optional<Reply> r = m.wait_for(id, m.options.timeout_ms);
      if (!r)
        throw ClientError("timeout",
                          std::string("no message of ") + op_name(op) + " (request " +
                              std::to_string(id) + ") within " +
                              std::to_string(m.options.timeout_ms) + " ms",
                          id);
      if (r->ok && !is_final_reply(*r)) {
        on_message(*r);
        continue;
      }
      if (r->ok) return std::move(*r);
      if (r->error.code == errc::overloaded && attempt < m.options.max_overloaded_retries) {
        const uint32_t wait = std::max<uint32_t>(1, r->error.retry_after_ms);
        std::this_thread::sleep_for(std::chrono::milliseconds(wait));
        break;  // resend under a new id
      }
      throw ClientError(r->error.code, r->error.message, id);
    }
  }
}

uint64_t Client::send(Op op, RequestBody body, Frames frames) {
  Impl& m = *impl_;
  const uint64_t id = m.next_id++;
  m.send_raw(id, op, body, frames);
  m.pending.insert(id);
  return id;
}

std::optional<Reply> Client::receive(int timeout_ms) {
  Impl& m = *impl_;
  if (!m.ready.empty()) {
    Reply r = std::move(m.ready.front());
    m.ready.pop_front();
    if (is_final_reply(r)) m.pending.erase(r.request_id);
    return r;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  do {
    std::optional<Reply> r = m.read_one(Impl::remaining_ms(deadline));
    if (!r) return std::nullopt;
    if (m.pending.count(r->request_id)) {
      if (is_final_reply(*r)) m.pending.erase(r->request_id);
      return r;
    }
  } while (Impl::remaining_ms(deadline) > 0);
  return std::nullopt;
}

}  // namespace spindle::protocol
