// The front thread's cluster plumbing (front.h, cluster_wire.h): a coordinator's relay and hub
// calls, a worker's heartbeats, forwarded requests and blob fetches.

#include <unistd.h>

#include <zmq_addon.hpp>

#include "engine_ops.h"
#include "front.h"
#include "peer_send.h"
#include "spindle/core/error.h"

namespace spindle::service {

namespace cw = cluster_wire;
using namespace protocol;
using Clock = std::chrono::steady_clock;

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}


}  // namespace

void Front::relay(const Call& call, std::vector<std::string> parts, bool final) {
  if (final && in_flight_ > 0) set_in_flight(in_flight_ - 1);
  if (call.socket >= routers_.size()) return;
  std::vector<zmq::const_buffer> out;
  out.reserve(call.envelope.size() + parts.size());
  for (const auto& f : call.envelope) out.push_back(zmq::buffer(f));
  for (const auto& p : parts) out.push_back(zmq::buffer(p));
  const PeerSend r = send_to_peer(*routers_[call.socket], out);
  if (r != PeerSend::sent) d_.log->debug("a relayed reply was dropped: {}", peer_send_name(r));
}

void Front::on_cluster_send(const Route& route, std::vector<std::string>& parts) {
  if (!cluster_ || parts.size() < 2) {
    d_.log->error("internal: a cluster message with no cluster socket was dropped");
    return;
  }
  if (route.envelope_frames == 2 && parts.size() >= 4) {
    // A worker's reply to a forward: [reply][id] + header + frames; the id frame gets the flags.
    if (route.final && in_flight_ > 0) set_in_flight(in_flight_ - 1);
    parts[2].push_back(char((route.final ? cw::kReplyFinal : 0) | (route.ok ? cw::kReplyOk : 0)));
  }
  std::vector<zmq::const_buffer> out;
  for (size_t i = 1; i < parts.size(); ++i) out.push_back(zmq::buffer(parts[i]));
  const PeerSend r = send_to_peer(*cluster_, out);
  if (r != PeerSend::sent) d_.log->warn("a cluster message was dropped: {}", peer_send_name(r));
}

void Front::on_wake() {
  if (hub_) return hub_->send_forwards();
  if (!d_.cluster->worker() || !cluster_) return;
  for (ClusterState::Ask& a : d_.cluster->take_asks()) {
    const std::string id = cw::id_frame(a.id);
    std::vector<zmq::const_buffer> out{zmq::buffer(a.kind), zmq::buffer(id)};
    for (const std::string& f : a.frames) out.push_back(zmq::buffer(f));
    if (send_to_peer(*cluster_, out) != PeerSend::sent) {
      a.promise->set_exception(std::make_exception_ptr(
          Error(a.on_fail, fmt::format("{}: the coordinator cannot be reached", a.what))));
      continue;
    }
    asks_.emplace(a.id, PendingAsk{std::move(a.promise), Clock::now()});
  }
}

void Front::cluster_tick() {
  const auto now = Clock::now();
  if (hub_) return hub_->tick(now);
  if (!d_.cluster->worker()) return;
  if (last_welcome_ == Clock::time_point{}) last_welcome_ = now;
  // No welcome for this long: the connection is dead in a way ZeroMQ does not retry (a CURVE
  // handshake that ZAP refused ends the session for good, so a key allow-listed later would
  // never be tried), or the coordinator is gone. A fresh connect costs nothing either way.
  const auto silence = std::chrono::duration<double>(std::max(5.0, 10 * d_.config.heartbeat_s));
  if (now - last_welcome_ > silence) reconnect_coordinator(now);
  if (now - last_hello_ >= std::chrono::duration<double>(d_.config.heartbeat_s)) {
    send_hello(draining_);
  }
  for (auto it = asks_.begin(); it != asks_.end();) {  // its waiter gave up long ago
    it = now - it->second.sent > std::chrono::seconds(120) ? asks_.erase(it) : std::next(it);
  }
}

void Front::reconnect_coordinator(Clock::time_point now) {
  last_welcome_ = now;
  try {
    cluster_->disconnect(cluster_endpoint_);
  } catch (const zmq::error_t&) {
    // ENOENT: the session already ended (a refused handshake); connect makes a new one.
  }
  try {
    cluster_->connect(cluster_endpoint_);
  } catch (const zmq::error_t& e) {
    d_.log->error("cluster: reconnecting to {} failed: {}", cluster_endpoint_, e.what());
    return;
  }
  welcomed_ = false;
  // The first time at warn, then every 12th (about a minute at the default heartbeat).
  const bool loud = reconnects_++ % 12 == 0;
  d_.log->log(loud ? spdlog::level::warn : spdlog::level::debug,
              "cluster: no welcome from the coordinator {} for a while (down, or this worker's "
              "CURVE key not in its allow-list): reconnecting",
              cluster_endpoint_);
}

void Front::send_hello(bool draining) {
  if (!cluster_) return;
  last_hello_ = Clock::now();
  const ServedBase& b = d_.default_base();
  const scheduler::SchedulerStats st = b.scheduler->stats();
  const adapters::LoaderStats ls = b.loader->stats();
  cw::WorkerHello h;
  h.name = d_.config.worker_name;
  h.base = b.id;
  h.device = fmt::format("{} ({})", b.backend->device().name(), st.memory.device_name);
  h.host = host_name();
  h.pid = ::getpid();
  h.base_bytes = st.memory.base_bytes;
  h.device_free_bytes = b.backend->device().name() == "cpu" ? 0 : st.memory.free_bytes;
  h.serving_slots = uint32_t(st.device_slots);
  h.slots_used = uint32_t(st.device_slots_used);
  h.queue_depth = uint32_t(in_flight_);
  h.loader_queue = uint32_t(ls.queue_depth + ls.running);
  h.sessions = uint32_t(d_.sessions.size());
  h.tokens_per_s = tokens_per_s();
  h.served = d_.replies->served.load();
  h.draining = draining;
  const std::string body = cw::encode(h);
  const std::vector<zmq::const_buffer> out{zmq::buffer(cw::kHello), zmq::buffer(body)};
  send_to_peer(*cluster_, out);  // not connected yet: the next heartbeat tries again
}

void Front::on_cluster_message(std::vector<std::string> parts) {
  if (hub_) return hub_->on_message(std::move(parts));
  if (parts.empty()) return;
  const std::string& kind = parts[0];
  try {
    if (kind == cw::kForward) return on_forwarded(parts);
    if (kind == cw::kBlob || kind == cw::kStore) return on_answer(parts);
    if (kind == cw::kWelcome && parts.size() == 2) {
      const cw::Welcome w = cw::decode_welcome(parts[1]);
      last_welcome_ = Clock::now();  // a refusal too: the link works
      if (!w.error.empty()) {
        if (w.error != welcome_error_) d_.log->error("the coordinator refuses this worker: {}", w.error);
        welcome_error_ = w.error;
        welcomed_ = false;
        return;
      }
      if (!welcomed_) {
        d_.log->info("joined the coordinator {} as worker {} '{}'", cluster_endpoint_, w.worker_id,
                     d_.config.worker_name);
      }
      welcomed_ = true;
      reconnects_ = 0;
      welcome_error_.clear();
      return;
    }
    d_.log->warn("cluster: dropped a '{}' message of {} frames", kind.substr(0, 32), parts.size());
  } catch (const std::exception& e) {
    d_.log->warn("cluster: dropped a '{}' message: {}", kind.substr(0, 32), e.what());
  }
}

// The answer to a ClusterState::ask: its frames after the id (an unknown id: its waiter gave up).
void Front::on_answer(std::vector<std::string>& parts) {
  uint64_t id = 0;
  if (parts.size() < 2 || !cw::parse_id(parts[1], id)) return;
  const auto it = asks_.find(id);
  if (it == asks_.end()) return;
  it->second.promise->set_value(std::vector<std::string>(std::make_move_iterator(parts.begin() + 2),
                                                         std::make_move_iterator(parts.end())));
  asks_.erase(it);
}

// [forward][id][ForwardHeader][request header][tensor frames...]
void Front::on_forwarded(std::vector<std::string>& parts) {
  if (parts.size() < 4) {
    d_.log->warn("cluster: dropped a forward of {} frames", parts.size());
    return;
  }
  Call call;
  call.socket = kClusterRoute;
  call.envelope = {std::string(cw::kReply), parts[1]};
  set_in_flight(in_flight_ + 1);  // every path below replies through d_.replies, once
  cw::ForwardHeader header;
  Request req;
  try {
    header = cw::decode_forward(parts[2]);
    call.tenant = header.tenant;
    req = decode_request(std::span<const std::string>(parts).subspan(3), d_.config.limits);
  } catch (const ProtocolError& e) {
    call.encoding = e.encoding.value_or(Encoding::binary);
    call.request_id = e.request_id;
    call.op = e.op.value_or(Op::handshake);
    return d_.replies->error(call, e.code(), e.what());
  } catch (const std::exception& e) {
    return reply_exception(d_, call, e);
  }
  call.encoding = req.encoding;
  call.request_id = req.request_id;
  call.op = req.op;
  if (draining_) return d_.replies->error(call, errc::unavailable, "worker is shutting down");
  dispatch_forwarded(d_, std::move(call), std::move(req), std::move(header));
}

void Front::serve_cluster_status(const Call& call, const Request&) {
  ClusterStatusReply out;
  if (hub_) {
    out = hub_->status();
    for (const Session& s : d_.sessions.of_tenant(call.tenant)) {
      if (s.ranks.size() < 2) continue;
      out.data_parallel.push_back(
          {s.id, "spindle://" + s.tenant + "/" + s.policy, s.ranks, s.generation});
    }
  } else {
    out.role = role_name(d_.cluster->role());
    out.cluster_endpoint = cluster_endpoint_;
  }
  send_direct(call, make_ok(call, std::move(out), {}));
}

}  // namespace spindle::service
