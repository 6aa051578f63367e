#pragma once
// The daemon's figures as Prometheus text exposition (format 0.0.4), for GET /metrics
// (metrics_http.h). Every family has HELP and TYPE lines; names follow Prometheus conventions
// (`_total` counters, base units: bytes, seconds, ratios in [0, 1]):
//   spindle_requests_total{op,code}   counter  requests answered (reply_counters.h)
//   spindle_errors_total{code}        counter  those answered with an error
//   spindle_queue_depth, spindle_parked_requests, spindle_running_sequences,
//   spindle_training_sessions         gauges
//   spindle_sampled_tokens_total      counter; spindle_tokens_per_second gauge (last ~10 s)
//   spindle_device_slots{state=used|total}, spindle_cache_hit_ratio{tier=device|host},
//   spindle_host_cache_bytes, spindle_host_cache_capacity_bytes,
//   spindle_adapter_loads{state=queued|running}, spindle_load_wait_seconds_mean,
//   spindle_device_memory_bytes{kind=base|kv|serving_slots|training_slots|free|total},
//   spindle_uptime_seconds            gauges
//   spindle_info{version,device,dtype} 1
// The figures are the `status` op's (server_status.h), so the two always agree.
//
// Threading: collect_metrics reads only thread-safe state (see server_status.h) and is safe
// from any thread while the daemon's engine and reply channel exist; render_metrics is pure.

#include <cstdint>
#include <string>

#include "reply_counters.h"
#include "spindle/protocol/messages.h"

namespace spindle::service {

struct Daemon;

struct MetricsSample {
  protocol::StatusReply status;  // server_status(): every placement, the server's counters
  uint64_t sampled_tokens = 0;   // since start (the scheduler's)
  ReplyCounters::Counts replies;
  uint64_t resolutions_cached = 0;   // ResolutionCache::hits
  uint64_t resolutions_catalog = 0;  // ResolutionCache::catalog_lookups
};

MetricsSample collect_metrics(const Daemon& d);
std::string render_metrics(const MetricsSample& m);

// The exposition's content type.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace spindle::service
