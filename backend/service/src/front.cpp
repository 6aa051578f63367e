#include "front.h"

#include <zmq_addon.hpp>

#include "cluster_ops.h"
#include "engine_ops.h"
#include "heap_trim.h"
#include "peer_send.h"
#include "reward_tests.h"
#include "server_status.h"
#include "tokenizer_ops.h"
#include "spindle/engine/loss.h"
#include "spindle/rl/config.h"

namespace spindle::service {

using namespace protocol;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> recv_parts(zmq::socket_t& s) {
  std::vector<zmq::message_t> msgs;
  std::vector<std::string> parts;
  if (!zmq::recv_multipart(s, std::back_inserter(msgs), zmq::recv_flags::dontwait)) return parts;
  parts.reserve(msgs.size());
  for (auto& m : msgs) parts.push_back(m.to_string());
  return parts;
}

}  // namespace

Front::Front(Daemon& d, std::vector<zmq::socket_t*> routers, zmq::socket_t& pub,
             zmq::socket_t& pull, zmq::socket_t* cluster, std::string cluster_endpoint)
    : d_(d),
      routers_(routers),
      pub_(pub),
      pull_(pull),
      events_(d, std::move(routers)),
      cluster_(cluster),
      cluster_endpoint_(std::move(cluster_endpoint)) {
  if (cluster_ && d_.cluster->coordinator()) {
    hub_ = std::make_unique<ClusterHub>(
        d_, *cluster_, cluster_endpoint_,
        [this](const Call& call, std::vector<std::string> parts, bool final) {
          relay(call, std::move(parts), final);
        },
        [this](const Call& call, const std::string& code, const std::string& message) {
          send_direct(call, make_error(call, code, message));
          if (in_flight_ > 0) set_in_flight(in_flight_ - 1);
        });
  }
}

Front::~Front() = default;

void Front::run(const std::atomic<bool>& stop, std::atomic<bool>& rescan) {
  Clock::time_point deadline{};
  std::vector<zmq::pollitem_t> items;
  for (auto* r : routers_) items.push_back({r->handle(), 0, ZMQ_POLLIN, 0});
  const size_t cluster_item = items.size();
  if (cluster_) items.push_back({cluster_->handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({pull_.handle(), 0, ZMQ_POLLIN, 0});
  if (d_.cluster->worker()) send_hello(false);
  for (;;) {
    for (auto& it : items) it.revents = 0;
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // a signal (SIGTERM: the stop flag is checked below)
    }
    // Replies first: they finish work and free queue room.
    if (items.back().revents & ZMQ_POLLIN) {
      for (int i = 0; i < 256; ++i) {
        auto parts = recv_parts(pull_);
        if (parts.empty()) break;
        on_reply(std::move(parts));
      }
    }
    if (cluster_ && (items[cluster_item].revents & ZMQ_POLLIN)) {
      for (int i = 0; i < 256; ++i) {
        auto parts = recv_parts(*cluster_);
        if (parts.empty()) break;
        on_cluster_message(std::move(parts));
      }
    }
    for (size_t s = 0; s < routers_.size(); ++s) {
      if (!(items[s].revents & ZMQ_POLLIN)) continue;
      for (int i = 0; i < 64; ++i) {
        auto parts = recv_parts(*routers_[s]);
        if (parts.empty()) break;
        on_request(uint8_t(s), std::move(parts));
      }
    }
    if (rescan.exchange(false)) {
      d_.reward_tests->rescan_plugins();
      d_.log->info("SIGHUP: reward plugins will be rescanned before the next reward test");
    }
    if (stop.load() && !draining_) {
      draining_ = true;
      deadline = Clock::now() + std::chrono::milliseconds(int64_t(d_.config.drain_timeout_s * 1000));
      d_.log->info("stopping: refusing new requests, {} in flight", in_flight_);
      events_.close_all();
      if (d_.cluster->worker()) send_hello(true);  // out of placement now, not at the timeout
    }
    if (draining_ && in_flight_ == 0) break;
    if (draining_ && Clock::now() > deadline) {
      d_.log->error("drain timeout: {} request(s) still in flight are abandoned", in_flight_);
      break;
    }
    sample_throughput();
    publish_residency();
    housekeeping();
    cluster_tick();
  }
}

// About once a second: expired session leases; every heap_trim_s, freed heap pages back to the
// kernel; every expiry_sweep_s, ephemeral revisions past expiry (collected on the catalog
// thread, their cached resolutions dropped).
void Front::housekeeping() {
  const auto now = Clock::now();
  if (now - last_housekeeping_ < std::chrono::seconds(1)) return;
  last_housekeeping_ = now;
  close_expired_sessions(d_);
  if (d_.config.heap_trim_s > 0 &&
      now - last_heap_trim_ >= std::chrono::duration<double>(d_.config.heap_trim_s)) {
    last_heap_trim_ = now;
    const HeapTrim t = trim_heap();
    d_.log->debug("heap trim: rss {:.1f} -> {:.1f} MiB in {:.1f} ms",
                  double(t.rss_before) / double(1 << 20), double(t.rss_after) / double(1 << 20),
                  1e3 * t.seconds);
  }
  if (now - last_expiry_sweep_ < std::chrono::duration<double>(d_.config.expiry_sweep_s)) return;
  last_expiry_sweep_ = now;
  d_.catalog.post([&d = d_](catalog::Catalog& cat) {
    try {
      const catalog::ExpiryReport r = cat.collect_expired("spindled");
      for (const catalog::ExpiredRevision& e : r.expired) {
        d.resolutions.drop_revision(e.tenant, e.policy, e.revision_id);
      }
      if (!r.expired.empty()) {
        d.log->info("collected {} expired ephemeral revision(s): {} blob(s), {:.1f} MiB freed",
                    r.expired.size(), r.blobs_deleted, double(r.bytes_freed) / double(1 << 20));
      }
    } catch (const std::exception& e) {
      d.log->error("collecting expired revisions failed: {}", e.what());
    }
  });
}

void Front::on_reply(std::vector<std::string> parts) {
  const std::optional<Route> route = parts.empty() ? std::nullopt : decode_route(parts[0]);
  if (route && route->socket == kWakeRoute) return on_wake();
  if (route && route->socket == kClusterRoute) return on_cluster_send(*route, parts);
  if (route && route->socket == kPublishRoute && parts.size() == 3) {
    pub_.send(zmq::buffer(parts[1]), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(parts[2]), zmq::send_flags::dontwait);
    if (parts[1] == "metrics") events_.on_metrics(parts[2]);
    return;
  }
  if (!route || route->socket >= routers_.size() ||
      parts.size() < size_t(route->envelope_frames) + 2) {
    d_.log->error("internal: malformed reply on the reply channel dropped");
    return;
  }
  if (route->final && in_flight_ > 0) set_in_flight(in_flight_ - 1);
  std::vector<zmq::const_buffer> out;
  out.reserve(parts.size() - 1);
  for (size_t i = 1; i < parts.size(); ++i) out.push_back(zmq::buffer(parts[i]));
  const PeerSend r = send_to_peer(*routers_[route->socket], out);
  if (r != PeerSend::sent) d_.log->debug("a reply was dropped: {}", peer_send_name(r));
}

void Front::send_direct(const Call& call, const Reply& reply) {
  Reply fallback;
  std::string header;
  const Reply* sent = &d_.replies->encode_counted(call, reply, fallback, header);
  std::vector<zmq::const_buffer> out;
  for (const auto& f : call.envelope) out.push_back(zmq::buffer(f));
  out.push_back(zmq::buffer(header));
  for (const auto& f : sent->frames) out.push_back(zmq::buffer(f));
  const PeerSend r = send_to_peer(*routers_[call.socket], out);
  if (r != PeerSend::sent) {
    d_.log->debug("reply to request {} ({}) dropped: {}", call.request_id, op_name(call.op),
                  peer_send_name(r));
  }
}

void Front::refuse(const Call& call, const char* code, const std::string& message) {
  send_direct(call, make_error(call, code, message));
}

void Front::on_request(uint8_t socket, std::vector<std::string> parts) {
  Call call;
  call.socket = socket;
  // Envelope: the ROUTER identity, plus an empty delimiter when the client sent one (REQ). A
  // message that is one empty frame after the identity has no delimiter: it is an empty header
  // (bad_request, as a DEALER that sent it expects).
  size_t body = 1;
  if (parts.size() > 2 && parts[1].empty()) body = 2;
  call.envelope.assign(parts.begin(), parts.begin() + std::ptrdiff_t(std::min(body, parts.size())));
  if (parts.size() <= body) {
    d_.log->warn("dropped a message with no frame after its identity on socket {}", socket);
    return;
  }
  Request req;
  try {
    req = decode_request(std::span<const std::string>(parts).subspan(body), d_.config.limits);
  } catch (const ProtocolError& e) {
    call.encoding = e.encoding.value_or(Encoding::binary);
    call.request_id = e.request_id;
    call.op = e.op.value_or(Op::handshake);
    return send_direct(call, make_error_reply(e));
  } catch (const std::exception& e) {
    return refuse(call, errc::bad_request, e.what());
  }
  call.encoding = req.encoding;
  call.request_id = req.request_id;
  call.op = req.op;
  const auto tenant = d_.tokens.find(req.token);
  if (tenant == d_.tokens.end()) {
    return refuse(call, errc::unauthenticated,
                  req.token.empty() ? "no token" : "unknown token");
  }
  call.tenant = tenant->second;
  if (draining_) return refuse(call, errc::unavailable, "server is shutting down");
  try {
    validate_request(req, d_.config.limits);
  } catch (const ProtocolError& e) {
    return refuse(call, e.code().c_str(), e.what());
  }

  const OpRoute& route = op_route(req.op);
  if (route.category == OpCategory::front) return on_front_op(call, req, route.front);

  if (in_flight_ >= d_.config.max_queue && may_be_overloaded(route.category)) {
    Reply r = make_error(call, errc::overloaded, "server overloaded: retry later");
    r.error.queue_depth = in_flight_;
    r.error.queue_limit = d_.config.max_queue;
    r.error.retry_after_ms = d_.config.retry_after_ms;
    return send_direct(call, r);
  }
  // From here on the reply comes back through the reply channel, from whichever thread.
  set_in_flight(in_flight_ + 1);
  route.dispatch(d_, std::move(call), std::move(req));
}

void Front::on_front_op(const Call& call, const Request& req, FrontHandler handler) {
  try {
    (this->*handler)(call, req);
  } catch (const std::exception& e) {
    auto [code, message] = wire_error(e);
    send_direct(call, make_error(call, code, message));
  }
}

void Front::serve_handshake(const Call& call, const Request& req) {
  const auto& h = std::get<HandshakeRequest>(req.body);
  d_.log->debug("handshake from '{}' (tenant {})", h.client_name, call.tenant);
  send_direct(call, make_ok(call, HandshakeReply{kProtocolVersion, kServerVersion, call.tenant}, {}));
}

void Front::serve_capabilities(const Call& call, const Request&) {
  CapabilitiesReply c;
  for (const auto& b : d_.bases) {
    const auto& m = b->weights.config;
    c.bases.push_back({b->id, engine::arch_name(m.arch), m.n_layers, m.dim, m.vocab_size,
                       m.max_seq_len, m.bos_id, m.eos_id});
  }
  c.limits = d_.config.limits.info();
  c.limits.max_queue = d_.config.max_queue;
  c.limits.max_sessions = d_.config.max_sessions;
  for (auto fn : {engine::LossFn::cross_entropy, engine::LossFn::importance_sampling,
                  engine::LossFn::ppo, engine::LossFn::cispo, engine::LossFn::dro}) {
    c.loss_fns.push_back(engine::loss_fn_name(fn));
  }
  c.encodings = {"B", "J"};
  c.default_run_config_json = rl::default_arith_config().to_json();
  send_direct(call, make_ok(call, std::move(c), {}));
}

// Placements name adapters: a tenant sees its own only (the events' rule); the aggregate
// figures are the server's.
void Front::serve_status(const Call& call, const Request&) {
  send_direct(call, make_ok(call, d_.owners.for_tenant(status(), call.tenant), {}));
}

void Front::serve_tokenize(const Call& call, const Request& req) {
  Frames frames;
  TokenizeReply out = tokenize(d_, std::get<TokenizeRequest>(req.body), frames);
  send_direct(call, make_ok(call, std::move(out), std::move(frames)));
}

void Front::serve_detokenize(const Call& call, const Request& req) {
  send_direct(call, make_ok(call, detokenize(d_, std::get<DetokenizeRequest>(req.body), req.frames), {}));
}

void Front::serve_tokenizer_info(const Call& call, const Request& req) {
  send_direct(call, make_ok(call, tokenizer_info(d_, std::get<TokenizerInfoRequest>(req.body)), {}));
}

void Front::serve_heartbeat(const Call& call, const Request& req) {
  const auto& h = std::get<HeartbeatRequest>(req.body);
  HeartbeatReply out;
  out.lease_ms = uint32_t(d_.config.session_lease_s * 1000.0);
  out.unknown = d_.sessions.renew(call.tenant, h.session_ids);
  send_direct(call, make_ok(call, std::move(out), {}));
}

void Front::serve_subscribe(const Call& call, const Request& req) {
  events_.subscribe(call, std::get<SubscribeRequest>(req.body));
}

void Front::serve_unsubscribe(const Call& call, const Request& req) {
  const uint64_t id = std::get<UnsubscribeRequest>(req.body).subscription;
  if (!events_.unsubscribe(call, id)) {
    return send_direct(call, make_error(call, errc::not_found,
                                        "no live subscription " + std::to_string(id) +
                                            " on this connection"));
  }
  send_direct(call, make_ok(call, Empty{}, {}));
}

StatusReply Front::status() const {
  return server_status(d_, scheduler_stats(d_), in_flight_, tokens_per_s());
}

double Front::tokens_per_s() const {
  if (throughput_.size() < 2) return 0.0;
  const double dt =
      std::chrono::duration<double>(throughput_.back().first - throughput_.front().first).count();
  if (dt <= 0) return 0.0;
  return double(throughput_.back().second - throughput_.front().second) / dt;
}

void Front::set_in_flight(uint64_t n) {
  in_flight_ = n;
  d_.front_figures.queue_depth.store(n, std::memory_order_relaxed);
}

void Front::sample_throughput() {
  const auto now = Clock::now();
  if (!throughput_.empty() && now - throughput_.back().first < std::chrono::seconds(1)) return;
  uint64_t sampled = 0;
  for (const auto& b : d_.bases) sampled += b->scheduler->stats().sampled_tokens;
  throughput_.emplace_back(now, sampled);
  while (throughput_.size() > 11) throughput_.pop_front();
  d_.front_figures.tokens_per_s.store(tokens_per_s(), std::memory_order_relaxed);
}

// At most once a second: subscriptions get their tenant's view (events.h); the PUB socket gets
// topic "residency", then the status as a J-encoded reply (op status, request_id 0), only when
// a placement changed.
void Front::publish_residency() {
  const auto now = Clock::now();
  if (now - last_publish_ < std::chrono::seconds(1)) return;
  last_publish_ = now;
  StatusReply s = status();
  if (events_.wants_residency()) events_.on_status(s);
  std::string key;
  for (const auto& p : s.placements) key += fmt::format("{}:{}:{}:{};", p.revision_id, p.tier, p.slot, p.in_use);
  if (key == last_residency_) return;
  last_residency_ = key;
  Reply event;
  event.encoding = Encoding::json;
  event.op = Op::status;
  event.body = std::move(s);
  try {
    const std::string header = encode_reply_header(event);
    pub_.send(zmq::str_buffer("residency"), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(header), zmq::send_flags::dontwait);
  } catch (const std::exception& e) {
    d_.log->warn("residency event not published: {}", e.what());
  }
}

}  // namespace spindle::service
