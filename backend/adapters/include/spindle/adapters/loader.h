#pragma once
// Cold-load jobs for the residency tiers (DESIGN.md core idea 4): a priority queue served by
// a small pool of std::threads. Concurrent requests for one revision coalesce into one job;
// a queued job can be cancelled (its waiters get LoadCancelled); results land in the host
// cache before any waiter sees them.
//
// The load function is injected: production decodes a revision from the blob store, tests use
// a fake slow source. It runs on a loader thread, outside every lock, and may throw; its
// exception is delivered to every waiter of that job.
//
// Threading: all public methods are safe from any thread. One mutex guards the queue and the
// job table; lock order is loader mutex -> host cache mutex (the cache never calls back).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "spindle/adapters/blob_store.h"
#include "spindle/adapters/host_cache.h"
#include "spindle/core/error.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/model_config.h"

namespace spindle::adapters {

using AdapterPtr = std::shared_ptr<const engine::LoraWeights>;
using LoadFn = std::function<AdapterPtr(const std::string& revision_id)>;
using LoadFuture = std::shared_future<AdapterPtr>;

// Higher runs first; equal priorities run in request order. Prefetches run after everything a
// request is actually waiting on.
inline constexpr int32_t kDefaultLoadPriority = 0;
inline constexpr int32_t kPrefetchPriority = -1000;

// Delivered to the waiters of a job cancelled while still queued (or at loader shutdown).
class LoadCancelled : public Error {
 public:
  explicit LoadCancelled(const std::string& revision_id);
};

struct LoaderOptions {
  int32_t threads = 2;  // loader threads (>= 1)
  // Each loader thread raises its own nice value by this much (Linux: per thread), so that on
  // a contended CPU the batch loop wins over background decoding. 0 keeps the caller's.
  int32_t thread_nice = 10;
};

struct LoaderStats {
  size_t queue_depth = 0;  // jobs waiting for a thread
  size_t running = 0;      // jobs a thread is loading now
  uint64_t requests = 0;
  uint64_t cache_hits = 0;  // requests answered from the host cache at once
  uint64_t coalesced = 0;   // requests that joined a queued or running job
  uint64_t loads_started = 0;
  uint64_t loads_completed = 0;
  uint64_t loads_failed = 0;
  uint64_t cancelled = 0;
  // Queue wait: time from a job's creation until a thread picks it up (started jobs only).
  double wait_ms_total = 0.0;
  double wait_ms_max = 0.0;
  double mean_wait_ms() const { return loads_started ? wait_ms_total / double(loads_started) : 0.0; }
};

// Production source: maps a revision id to its blob id (`blob_of`; the catalog's lookup, or
// the identity when revisions are addressed by blob id), reads and verifies the blob, decodes
// the revision format and validates it against `base`. `store` must outlive the function.
// Errors name the revision (not_found, format, ...); a blob failing its checksum is data_loss
// naming the blob, its path and (with `blob_of`) the revision.
LoadFn blob_store_load_fn(const BlobStore& store, engine::ModelConfig base,
                          std::function<std::string(const std::string& revision_id)> blob_of = {});

class Loader {
 public:
  Loader(HostCache& cache, LoadFn load, LoaderOptions options = {});
  // Cancels queued jobs (waiters get LoadCancelled), waits for running loads, joins threads.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // A future for the revision's adapter: ready at once on a host-cache hit; otherwise joins
  // the revision's existing job (raising its priority if this one is higher) or queues a new
  // one. Never blocks on I/O.
  LoadFuture request(const std::string& revision_id, int32_t priority = kDefaultLoadPriority);
  LoadFuture prefetch(const std::string& revision_id) {
    return request(revision_id, kPrefetchPriority);
  }
  // Cancels a queued job; false when the id is not queued (unknown, or already running —
  // a running load is not interrupted).
  bool cancel(const std::string& revision_id);
  bool in_flight(const std::string& revision_id) const;  // queued or running
  LoaderStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  using QueueKey = std::tuple<int32_t, uint64_t, std::string>;  // (-priority, seq, id)
  struct Job {
    std::promise<AdapterPtr> promise;
    LoadFuture future;
    QueueKey key;
    Clock::time_point created;
    bool running = false;
  };
  void worker_loop();

  int32_t thread_nice_ = 0;
  HostCache& cache_;
  LoadFn load_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::unordered_map<std::string, Job> jobs_;  // queued and running; guarded by mutex_
  std::set<QueueKey> queue_;                   // queued only, best first; guarded by mutex_
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  LoaderStats stats_;  // counters; queue_depth/running filled in by stats()
  std::vector<std::thread> threads_;
};

}  // namespace spindle::adapters
