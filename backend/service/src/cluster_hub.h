#pragma once
// The coordinator's side of the cluster, owned by the front thread (issue 17): the worker table
// fed by hellos, cluster::Placement, the forwards in flight and their relay. Workers join by
// sending hellos to the cluster ROUTER (cluster_wire.h); one missing its heartbeats for
// worker_timeout_s, or saying it drains, is lost: it leaves placement, its forwards in flight
// fail `unavailable` (clients retry, protocol rule), and later requests go to the next worker in
// the policy's rendezvous order. A worker that comes back under its name gets its id back and
// the policies that preferred it.
//
// Blobs: a worker's blob_get is answered from the blob store on the hub's own reader thread
// (never the front thread: it reads and hashes files), through the reply channel.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include <zmq.hpp>

#include "cluster_state.h"
#include "daemon_state.h"
#include "spindle/cluster/placement.h"
#include "spindle/protocol/messages_cluster.h"

namespace spindle::service {

class ClusterHub {
 public:
  using Clock = std::chrono::steady_clock;
  // Sends a forwarded call's reply frames ([header][frames...]) to its client; `final` ends it.
  using RelayFn = std::function<void(const Call& call, std::vector<std::string> parts, bool final)>;
  // Sends an error reply to the client (and ends the call).
  using FailFn = std::function<void(const Call& call, const std::string& code, const std::string& message)>;

  ClusterHub(Daemon& d, zmq::socket_t& router, std::string endpoint, RelayFn relay, FailFn fail);
  ~ClusterHub();

  void on_message(std::vector<std::string> parts);  // from the cluster ROUTER
  void send_forwards();                             // the posted ones, in post order
  void tick(Clock::time_point now);                 // heartbeat timeouts
  protocol::ClusterStatusReply status() const;
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Worker {
    std::string identity;  // ROUTER routing id of its connection
    cluster_wire::WorkerHello hello;
    Clock::time_point last_seen{};
    Clock::time_point joined{};
    bool alive = false;
    uint64_t forwarded = 0;  // forwards sent to it
    uint32_t in_flight = 0;  // of which unanswered
  };
  struct Pending {
    uint32_t worker = 0;
    Forward forward;
  };

  void on_hello(const std::string& identity, const std::string& body);
  void on_reply(const std::vector<std::string>& parts);
  void on_blob_get(const std::string& identity, const std::vector<std::string>& parts);
  void on_store(const std::string& identity, const std::vector<std::string>& parts);
  std::optional<cluster::WorkerId> place_rank(const Forward& f, std::string& why) const;
  void send_forward(Forward& f);
  void lose(uint32_t worker, const std::string& why);
  void finish(Forward& f, ForwardOutcome& outcome, bool final);
  void fail_forward(Forward& f, uint32_t worker, const std::string& message);
  void update_load(uint32_t worker);

  Daemon& d_;
  zmq::socket_t& router_;
  std::string endpoint_;
  RelayFn relay_;
  FailFn fail_;
  cluster::Placement placement_;
  std::map<uint32_t, Worker> workers_;  // by Placement id
  std::map<uint64_t, Pending> pending_;
  uint64_t next_forward_ = 1;

  // The blob reader thread: reads blobs for blob_get and replies through the reply channel.
  struct BlobReader;
  std::unique_ptr<BlobReader> reader_;
};

}  // namespace spindle::service
