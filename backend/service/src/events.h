#pragma once
// Tenant-scoped event streams on the request sockets (op `subscribe`, PROTOCOL.md "Events").
// Unlike the PUB socket (IPC only: every local process of the daemon's Unix user sees every
// event), a subscription lives on the caller's own ROUTER connection, so it works over TCP with
// CURVE, and it carries only the caller's tenant's events:
//   metrics    every run_status event the run manager publishes for a run of that tenant;
//   residency  the front's status with placements restricted to that tenant's residency keys
//              (AdapterOwners), aggregate counters untouched; sent once within about a second
//              of subscribing and then whenever those placements change (checked once a second).
// Every message is an EventReply with the subscribe request's id, in the subscriber's encoding:
// "subscribed" first, events, then "closed" with final = true (unsubscribe, daemon stop).
//
// Delivery is best-effort and never blocks the front: a subscriber whose queue is full misses
// that event; one whose connection is gone (EHOSTUNREACH, peer_send.h) is dropped at the next
// event sent to it. At most kMaxPerTenant live subscriptions per tenant (then
// resource_exhausted). Subscriptions are not requests in flight: draining never waits for them.
//
// Threading: the front thread only (it owns the ROUTERs).

#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "reply_channel.h"
#include "spindle/protocol/wire.h"

namespace spindle::service {

struct Daemon;

class EventHub {
 public:
  static constexpr size_t kMaxPerTenant = 64;

  EventHub(Daemon& d, std::vector<zmq::socket_t*> routers) : d_(d), routers_(std::move(routers)) {}

  // Adds a subscription for `call` (op subscribe) and sends its "subscribed" message. Throws
  // spindle::Error: resource past kMaxPerTenant, invalid_argument when the request id
  // already names a live subscription of this connection.
  void subscribe(const Call& call, const protocol::SubscribeRequest& request);
  // Ends subscription `id` of the caller's connection (same socket, envelope and tenant) with
  // its final "closed" message; false when there is none.
  bool unsubscribe(const Call& call, uint64_t id);
  // A J-encoded run_status reply header published by the run manager (topic "metrics").
  void on_metrics(const std::string& header);
  // The front's status (all placements), at most once a second.
  void on_status(const protocol::StatusReply& status);
  // Every subscription gets its final "closed" message; none is left.
  void close_all();

  bool wants_metrics() const;
  bool wants_residency() const;
  size_t size() const { return subs_.size(); }

 private:
  struct Subscription {
    Call call;  // the subscribe request's route, id, encoding and tenant
    bool metrics = false;
    bool residency = false;
    std::optional<std::string> residency_key;  // placements last sent (none yet)
  };
  // False when the peer is gone (the caller drops the subscription).
  bool send_event(const Subscription& s, protocol::EventReply event);
  bool same_connection(const Subscription& s, const Call& call) const;

  Daemon& d_;
  std::vector<zmq::socket_t*> routers_;
  std::vector<Subscription> subs_;
};

}  // namespace spindle::service
