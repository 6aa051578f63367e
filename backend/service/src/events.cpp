#include "events.h"

#include <algorithm>

#include "daemon_state.h"
#include "peer_send.h"

namespace spindle::service {

using namespace protocol;

namespace {

std::string placements_key(const StatusReply& s) {
  std::string key;
  for (const auto& p : s.placements) {
    key += fmt::format("{}:{}:{}:{};", p.revision_id, p.tier, p.slot, p.in_use);
  }
  return key;
}

}  // namespace

bool EventHub::same_connection(const Subscription& s, const Call& call) const {
  return s.call.socket == call.socket && s.call.envelope == call.envelope &&
         s.call.tenant == call.tenant;
}

void EventHub::subscribe(const Call& call, const SubscribeRequest& request) {
  size_t of_tenant = 0;
  for (const Subscription& s : subs_) {
    if (s.call.tenant == call.tenant) ++of_tenant;
    if (same_connection(s, call) && s.call.request_id == call.request_id) {
      SPINDLE_THROW(invalid_argument,
                    "request id {} already names a live subscription on this connection",
                    call.request_id);
    }
  }
  if (of_tenant >= kMaxPerTenant) {
    SPINDLE_THROW(resource,
                  "tenant '{}' has {} live subscriptions (the most allowed); unsubscribe one first",
                  call.tenant, of_tenant);
  }
  Subscription s;
  s.call = call;
  const auto& t = request.topics;
  s.metrics = t.empty() || std::find(t.begin(), t.end(), "metrics") != t.end();
  s.residency = t.empty() || std::find(t.begin(), t.end(), "residency") != t.end();
  EventReply first;
  first.topic = "subscribed";
  if (!send_event(s, std::move(first))) return;  // gone already
  d_.log->debug("subscription {} (tenant {}): metrics {}, residency {}", call.request_id,
                call.tenant, s.metrics, s.residency);
  subs_.push_back(std::move(s));
}

bool EventHub::unsubscribe(const Call& call, uint64_t id) {
  for (auto it = subs_.begin(); it != subs_.end(); ++it) {
    if (it->call.request_id != id || !same_connection(*it, call)) continue;
    EventReply last;
    last.final = true;
    last.topic = "closed";
    send_event(*it, std::move(last));
    subs_.erase(it);
    return true;
  }
  return false;
}

void EventHub::on_metrics(const std::string& header) {
  if (!wants_metrics()) return;
  RunStatusReply run;
  try {
    const Reply event = decode_reply(std::span<const std::string>(&header, 1));
    run = std::get<RunStatusReply>(event.body);
  } catch (const std::exception& e) {
    d_.log->error("internal: undecodable metrics event not forwarded: {}", e.what());
    return;
  }
  std::erase_if(subs_, [&](const Subscription& s) {
    if (!s.metrics || s.call.tenant != run.run.tenant) return false;
    EventReply e;
    e.topic = "metrics";
    e.run = run;
    return !send_event(s, std::move(e));
  });
}

void EventHub::on_status(const StatusReply& status) {
  std::erase_if(subs_, [&](Subscription& s) {
    if (!s.residency) return false;
    StatusReply mine = d_.owners.for_tenant(status, s.call.tenant);
    std::string key = placements_key(mine);
    if (s.residency_key == key) return false;
    EventReply e;
    e.topic = "residency";
    e.status = std::move(mine);
    s.residency_key = std::move(key);
    return !send_event(s, std::move(e));
  });
}

void EventHub::close_all() {
  for (const Subscription& s : subs_) {
    EventReply last;
    last.final = true;
    last.topic = "closed";
    send_event(s, std::move(last));
  }
  if (!subs_.empty()) d_.log->info("closed {} event subscription(s)", subs_.size());
  subs_.clear();
}

bool EventHub::wants_metrics() const {
  return std::any_of(subs_.begin(), subs_.end(), [](const Subscription& s) { return s.metrics; });
}

bool EventHub::wants_residency() const {
  return std::any_of(subs_.begin(), subs_.end(),
                     [](const Subscription& s) { return s.residency; });
}

bool EventHub::send_event(const Subscription& s, EventReply event) {
  const Reply reply = make_ok(s.call, std::move(event), {});
  std::string header;
  try {
    header = encode_reply_header(reply);
  } catch (const std::exception& e) {
    d_.log->error("internal: event for subscription {} not encoded: {}", s.call.request_id,
                  e.what());
    return true;
  }
  d_.replies->counters.count(reply);  // the subscribe request, once: at its final "closed"
  std::vector<zmq::const_buffer> parts;
  for (const std::string& f : s.call.envelope) parts.push_back(zmq::buffer(f));
  parts.push_back(zmq::buffer(header));
  const PeerSend r = send_to_peer(*routers_.at(s.call.socket), parts);
  if (r == PeerSend::unreachable) {
    d_.log->info("subscription {} (tenant {}) dropped: its connection is gone", s.call.request_id,
                 s.call.tenant);
    return false;
  }
  if (r == PeerSend::would_block) {
    d_.log->debug("subscription {}: an event was dropped ({})", s.call.request_id,
                  peer_send_name(r));
  }
  return true;
}

}  // namespace spindle::service
