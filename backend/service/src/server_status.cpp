#include "server_status.h"

namespace spindle::service {

protocol::StatusReply server_status(const Daemon& d, std::span<const scheduler::SchedulerStats> stats,
                                    uint64_t queue_depth, double tokens_per_s) {
  protocol::StatusReply s;
  s.server_version = kServerVersion;
  s.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - d.started).count();
  s.queue_depth = queue_depth;
  s.training_sessions = d.sessions.size();
  s.requests_served = d.replies->served.load();
  s.requests_failed = d.replies->failed.load();
  s.tokens_per_s = tokens_per_s;
  double device_hits = 0.0, host_hits = 0.0, load_wait = 0.0;
  for (size_t i = 0; i < d.bases.size() && i < stats.size(); ++i) {
    const ServedBase& b = *d.bases[i];
    const scheduler::SchedulerStats& st = stats[i];
    const adapters::HostCacheStats hc = b.host_cache->stats();
    const adapters::LoaderStats ls = b.loader->stats();
    s.parked += st.parked;
    s.running_sequences += st.running_sequences;
    s.device_slots += uint32_t(st.device_slots);
    s.device_slots_used += uint32_t(st.device_slots_used);
    s.host_cache_bytes += hc.bytes;
    s.host_cache_capacity += hc.capacity_bytes;
    s.loads_queued += ls.queue_depth;
    s.loads_running += ls.running;
    s.cold_parks += st.residency.cold_parks;
    s.busy_parks += st.residency.busy_parks;
    s.slot_evictions += st.residency.slot_evictions;
    device_hits += st.residency.device_hit_rate();
    host_hits += hc.hit_rate();
    load_wait += ls.mean_wait_ms();
    for (const auto& p : st.placements) {
      s.placements.push_back({p.revision_id, adapters::residency_tier_name(p.tier), p.slot, p.in_use});
    }
    if (i == 0) {
      s.device = st.device;
      s.device_name = st.memory.device_name;
      s.dtype = st.dtype;
      s.device_free_bytes = st.memory.free_bytes;
      s.device_total_bytes = st.memory.total_bytes;
    }
    s.base_bytes += st.memory.base_bytes;
    s.kv_bytes += st.kv_bytes;
    s.serving_pool_bytes += st.serving_pool_bytes;
    s.training_pool_bytes += st.training_pool_bytes;
    protocol::BaseStatus bs;
    bs.id = b.id;
    bs.device = st.device;
    bs.dtype = st.dtype;
    bs.base_bytes = st.memory.base_bytes;
    bs.kv_bytes = st.kv_bytes;
    bs.serving_pool_bytes = st.serving_pool_bytes;
    bs.training_pool_bytes = st.training_pool_bytes;
    bs.device_slots = uint32_t(st.device_slots);
    bs.device_slots_used = uint32_t(st.device_slots_used);
    bs.running_sequences = st.running_sequences;
    bs.training_sessions = d.sessions.size_on(&b);
    bs.queue_depth = st.queued;
    s.bases.push_back(std::move(bs));
  }
  // Hit rates and the load wait: the mean over bases (each base's own rates).
  const double n = double(std::max<size_t>(stats.size(), 1));
  s.device_hit_rate = device_hits / n;
  s.host_hit_rate = host_hits / n;
  s.mean_load_wait_ms = load_wait / n;
  return s;
}

std::vector<scheduler::SchedulerStats> scheduler_stats(const Daemon& d) {
  std::vector<scheduler::SchedulerStats> out;
  for (const auto& b : d.bases) out.push_back(b->scheduler->stats());
  return out;
}

}  // namespace spindle::service
