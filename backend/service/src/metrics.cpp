#include "metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "daemon_state.h"
#include "server_status.h"
#include "spindle/version.h"

namespace spindle::service {
namespace {

// A label value per the exposition format: backslash, double quote and newline escaped.
std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}
std::string value(uint64_t v) { return std::to_string(v); }

// Builds the text one family at a time: family() writes HELP and TYPE, sample() its lines.
class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    name_ = name;
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // labels: "key", "value", "key", "value", ... (values escaped here).
  template <class V>
  void sample(V v, std::initializer_list<std::string> labels = {}) {
    out_ += name_;
    if (labels.size() != 0) {
      out_ += '{';
      bool key = true, first = true;
      for (const std::string& l : labels) {
        if (key) {
          out_ += (first ? "" : ",") + l + "=\"";
          first = false;
        } else {
          out_ += escape_label(l) + '"';
        }
        key = !key;
      }
      out_ += '}';
    }
    out_ += ' ' + value(v) + '\n';
  }
  std::string take() { return std::move(out_); }

 private:
  std::string name_;
  std::string out_;
};

}  // namespace

MetricsSample collect_metrics(const Daemon& d) {
  const std::vector<scheduler::SchedulerStats> stats = scheduler_stats(d);
  MetricsSample m;
  m.status = server_status(d, stats, d.front_figures.queue_depth.load(std::memory_order_relaxed),
                           d.front_figures.tokens_per_s.load(std::memory_order_relaxed));
  for (const auto& st : stats) m.sampled_tokens += st.sampled_tokens;
  m.replies = d.replies->counters.snapshot();
  m.resolutions_cached = d.resolutions.hits();
  m.resolutions_catalog = d.resolutions.catalog_lookups();
  return m;
}

std::string render_metrics(const MetricsSample& m) {
  const protocol::StatusReply& s = m.status;
  Exposition e;
  e.family("spindle_requests_total", "counter",
           "Requests answered, by op and wire code (\"ok\" for a success); a stream counts once.");
  std::map<std::string, uint64_t> errors;
  for (const auto& [key, n] : m.replies) {
    e.sample(n, {"op", key.first, "code", key.second});
    if (key.second != "ok") errors[key.second] += n;
  }
  e.family("spindle_errors_total", "counter", "Requests answered with an error, by wire code.");
  for (const auto& [code, n] : errors) e.sample(n, {"code", code});

  e.family("spindle_queue_depth", "gauge", "Requests in flight (admitted, not yet answered).");
  e.sample(s.queue_depth);
  e.family("spindle_parked_requests", "gauge", "Sampling work waiting for a cold adapter.");
  e.sample(s.parked);
  e.family("spindle_running_sequences", "gauge", "Sequences decoding now.");
  e.sample(s.running_sequences);
  e.family("spindle_training_sessions", "gauge", "Open training sessions.");
  e.sample(s.training_sessions);

  e.family("spindle_sampled_tokens_total", "counter", "Tokens sampled since the daemon started.");
  e.sample(m.sampled_tokens);
  e.family("spindle_tokens_per_second", "gauge", "Sampled tokens per second over the last ~10 s.");
  e.sample(s.tokens_per_s);

  e.family("spindle_device_slots", "gauge", "Serving adapter slots on the device.");
  e.sample(uint64_t(s.device_slots_used), {"state", "used"});
  e.sample(uint64_t(s.device_slots), {"state", "total"});
  e.family("spindle_cache_hit_ratio", "gauge", "Adapter residency hit ratio, by tier.");
  e.sample(s.device_hit_rate, {"tier", "device"});
  e.sample(s.host_hit_rate, {"tier", "host"});
  e.family("spindle_host_cache_bytes", "gauge", "Decoded adapters held in the host cache.");
  e.sample(s.host_cache_bytes);
  e.family("spindle_host_cache_capacity_bytes", "gauge", "The host cache's capacity.");
  e.sample(s.host_cache_capacity);
  e.family("spindle_adapter_loads", "gauge", "Adapter cold loads, by state.");
  e.sample(s.loads_queued, {"state", "queued"});
  e.sample(s.loads_running, {"state", "running"});
  e.family("spindle_adapter_parks_total", "counter",
           "Admissions of sample work that waited for a serving slot, by cause: cold (not in "
           "host memory) or busy (every slot in use; retries count).");
  e.sample(s.cold_parks, {"cause", "cold"});
  e.sample(s.busy_parks, {"cause", "busy"});
  e.family("spindle_slot_evictions_total", "counter",
           "Adapters moved out of a serving slot to make room.");
  e.sample(s.slot_evictions);
  e.family("spindle_load_wait_seconds_mean", "gauge",
           "Mean time a cold load waited for a loader thread.");
  e.sample(s.mean_load_wait_ms / 1000.0);

  e.family("spindle_address_resolutions_total", "counter",
           "Policy addresses of sample, sample_stream and compute_logprobs requests resolved, "
           "by how: from the cache of immutable @<revision id> addresses (filled by earlier "
           "requests and by save_weights) or through the catalog.");
  e.sample(m.resolutions_cached, {"via", "cache"});
  e.sample(m.resolutions_catalog, {"via", "catalog"});

  e.family("spindle_device_memory_bytes", "gauge", "Device memory, by what holds it.");
  e.sample(s.base_bytes, {"kind", "base"});
  e.sample(s.kv_bytes, {"kind", "kv"});
  e.sample(s.serving_pool_bytes, {"kind", "serving_slots"});
  e.sample(s.training_pool_bytes, {"kind", "training_slots"});
  e.sample(s.device_free_bytes, {"kind", "free"});
  e.sample(s.device_total_bytes, {"kind", "total"});

  e.family("spindle_uptime_seconds", "gauge", "Seconds since the daemon started.");
  e.sample(s.uptime_s);
  e.family("spindle_info", "gauge", "The server's version, device and resident dtype.");
  e.sample(uint64_t(1), {"version", SPINDLE_VERSION, "device", s.device,
                         "dtype", s.dtype});
  return e.take();
}

}  // namespace spindle::service
