#pragma once
// Requests answered, by (op, wire code): what the metrics endpoint exports as
// spindle_requests_total{op,code} and spindle_errors_total{code} (metrics_http.h). One count per
// request: a reply counts when it ends its request (protocol::is_final_reply), so a stream
// (sample_stream, subscribe) counts once, at its final message. Code "ok" for a success, else
// the error's wire code; op "unknown" for a refusal of a request whose op was not understood.
// Counted where replies leave (ReplyChannel::encode_counted, which ReplyChannel::send and
// Front::send_direct share), at a subscription's final "closed" event (events.cpp), and where a
// coordinator relays a worker's final reply (cluster_hub.cpp). A request that gets no reply at all (a
// message with no header frame, a subscription whose connection vanished) is not counted.
//
// Threading: every method is safe from any thread (one mutex, held for a map update).

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "spindle/protocol/wire.h"

namespace spindle::service {

class ReplyCounters {
 public:
  // (op name, code) -> replies; ordered, so the metrics text is stable.
  using Counts = std::map<std::pair<std::string, std::string>, uint64_t>;

  // One count for (op, "ok" or the error code) when `reply` ends its request; a stream's other
  // messages are ignored.
  void count(const protocol::Reply& reply);
  // One count for a final reply known by its op name and code ("ok" or the wire code): a
  // coordinator's relay of a worker's reply, which it does not decode.
  void count(const std::string& op, const std::string& code);
  Counts snapshot() const;

 private:
  mutable std::mutex mutex_;
  Counts counts_;  // guarded by mutex_
};

}  // namespace spindle::service
