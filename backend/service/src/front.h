#pragma once
// The front thread: owns the ROUTERs, the PUB and the reply PULL (see service.h). Runs until
// `stop` is set and every request it handed off has been answered (or drain_timeout_s passed).
// While draining, new requests get `unavailable` and every event subscription is closed.
// A stream (sample_stream) counts as one request in flight until its final message.
// It mirrors its requests in flight (at every change) and token rate (once a second) into
// Daemon::front_figures, the metrics endpoint's view of them (server_status.h).

#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include <zmq.hpp>

#include "cluster_hub.h"
#include "daemon_state.h"
#include "events.h"
#include "op_table.h"

namespace spindle::service {

//
// Cluster (cluster_wire.h): a coordinator's front also owns the cluster ROUTER and its
// ClusterHub; a worker's owns the DEALER to its coordinator, heartbeats on it, runs what it is
// forwarded and sends the replies back on it (it has no client ROUTER).
class Front {
 public:
  // `cluster`: the coordinator's cluster ROUTER or the worker's DEALER (null: standalone);
  // `cluster_endpoint`: its endpoint (the coordinator's, for both).
  Front(Daemon& d, std::vector<zmq::socket_t*> routers, zmq::socket_t& pub, zmq::socket_t& pull,
        zmq::socket_t* cluster = nullptr, std::string cluster_endpoint = "");
  ~Front();
  // Serves until `stop`; `rescan` (set by SIGHUP) asks for a reward plugin rescan, as the
  // plugin_rescan op does, and is cleared when taken.
  void run(const std::atomic<bool>& stop, std::atomic<bool>& rescan);

 private:
  friend struct OpTable;  // op_table.cpp routes the front ops to the serve_* handlers

  void on_request(uint8_t socket, std::vector<std::string> parts);
  void on_reply(std::vector<std::string> parts);
  void send_direct(const Call& call, const protocol::Reply& reply);
  // Runs a front op's handler; an exception becomes its error reply.
  void on_front_op(const Call& call, const protocol::Request& req, FrontHandler handler);
  // The front ops (FrontHandler): each replies through send_direct before it returns.
  void serve_handshake(const Call& call, const protocol::Request& req);
  void serve_capabilities(const Call& call, const protocol::Request& req);
  void serve_status(const Call& call, const protocol::Request& req);
  void serve_tokenize(const Call& call, const protocol::Request& req);
  void serve_detokenize(const Call& call, const protocol::Request& req);
  void serve_tokenizer_info(const Call& call, const protocol::Request& req);
  void serve_heartbeat(const Call& call, const protocol::Request& req);
  void serve_subscribe(const Call& call, const protocol::Request& req);
  void serve_unsubscribe(const Call& call, const protocol::Request& req);
  void serve_cluster_status(const Call& call, const protocol::Request& req);
  // Cluster plumbing (both roles; see the class comment).
  void on_cluster_message(std::vector<std::string> parts);
  void on_cluster_send(const Route& route, std::vector<std::string>& parts);
  void on_wake();
  void cluster_tick();
  void send_hello(bool draining);
  void on_forwarded(std::vector<std::string>& parts);  // worker
  void on_answer(std::vector<std::string>& parts);     // worker: [blob|store][id][frames...]
  void relay(const Call& call, std::vector<std::string> parts, bool final);  // coordinator
  void refuse(const Call& call, const char* code, const std::string& message);
  protocol::StatusReply status() const;
  double tokens_per_s() const;
  void publish_residency();
  void sample_throughput();
  void housekeeping();
  void set_in_flight(uint64_t n);  // in_flight_ and its mirror in d_.front_figures

  Daemon& d_;
  std::vector<zmq::socket_t*> routers_;
  zmq::socket_t& pub_;
  zmq::socket_t& pull_;
  EventHub events_;         // subscribe/unsubscribe (events.h)
  zmq::socket_t* cluster_ = nullptr;
  std::string cluster_endpoint_;
  std::unique_ptr<ClusterHub> hub_;  // coordinator only
  // Worker: registration state and the blob fetches sent, by id. last_welcome_: the last
  // welcome (or the last reconnect); a long silence reconnects the DEALER (cluster_tick).
  void reconnect_coordinator(std::chrono::steady_clock::time_point now);
  std::chrono::steady_clock::time_point last_hello_{};
  std::chrono::steady_clock::time_point last_welcome_{};
  uint64_t reconnects_ = 0;
  std::string welcome_error_;
  bool welcomed_ = false;
  struct PendingAsk {  // ClusterState::ask: sent, its answer not yet in
    std::shared_ptr<std::promise<std::vector<std::string>>> promise;
    std::chrono::steady_clock::time_point sent;
  };
  std::map<uint64_t, PendingAsk> asks_;
  uint64_t in_flight_ = 0;  // handed-off requests not yet answered (set_in_flight only)
  bool draining_ = false;
  std::chrono::steady_clock::time_point last_publish_{};
  std::string last_residency_;
  std::chrono::steady_clock::time_point last_housekeeping_{};
  std::chrono::steady_clock::time_point last_expiry_sweep_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_heap_trim_ = std::chrono::steady_clock::now();
  // (time, sampled tokens) about once a second, the last ~10 s: tokens_per_s.
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> throughput_;
};

}  // namespace spindle::service
