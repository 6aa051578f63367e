#include "server_status.h"

namespace spindle::service {

protocol::StatusReply server_status(const Daemon& d, const scheduler::SchedulerStats& st,
                                    uint64_t queue_depth, double tokens_per_s) {
  const adapters::HostCacheStats hc = d.host_cache->stats();
  const adapters::LoaderStats ls = d.loader->stats();
  protocol::StatusReply s;
  s.server_version = kServerVersion;
  s.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - d.started).count();
  s.queue_depth = queue_depth;
  s.parked = st.parked;
  s.running_sequences = st.running_sequences;
  s.training_sessions = d.sessions.size();
  s.requests_served = d.replies->served.load();
  s.requests_failed = d.replies->failed.load();
  s.tokens_per_s = tokens_per_s;
  s.device_slots = uint32_t(st.device_slots);
  s.device_slots_used = uint32_t(st.device_slots_used);
  s.host_cache_bytes = hc.bytes;
  s.host_cache_capacity = hc.capacity_bytes;
  s.loads_queued = ls.queue_depth;
  s.loads_running = ls.running;
  s.device_hit_rate = st.residency.device_hit_rate();
  s.host_hit_rate = hc.hit_rate();
  s.mean_load_wait_ms = ls.mean_wait_ms();
  for (const auto& p : st.placements) {
    s.placements.push_back({p.revision_id, adapters::residency_tier_name(p.tier), p.slot, p.in_use});
  }
  s.device = st.device;
  s.device_name = st.memory.device_name;
  s.dtype = st.dtype;
  s.base_bytes = st.memory.base_bytes;
  s.kv_bytes = st.kv_bytes;
  s.serving_pool_bytes = st.serving_pool_bytes;
  s.training_pool_bytes = st.training_pool_bytes;
  s.device_free_bytes = st.memory.free_bytes;
  s.device_total_bytes = st.memory.total_bytes;
  return s;
}

}  // namespace spindle::service
