#include "spindle/adapters/loader.h"

#include "spindle/adapters/revision_format.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace spindle::adapters {

LoadCancelled::LoadCancelled(const std::string& revision_id)
    : Error(ErrorCode::resource, fmt::format("load of revision '{}' was cancelled", revision_id)) {}

LoadFn blob_store_load_fn(const BlobStore& store, engine::ModelConfig base,
                          std::function<std::string(const std::string&)> blob_of) {
  return [&store, base = std::move(base), blob_of = std::move(blob_of)](const std::string& id) {
    const std::string blob_id = blob_of ? blob_of(id) : id;
    const std::string source = fmt::format("revision '{}' (blob {})", id, blob_id);
    DecodedRevision decoded;
    try {
      decoded = store.get_revision(blob_id, source);
    } catch (const Error& e) {
      // The blob's message names the blob and its path; add the revision when it is not the
      // blob itself (the daemon keys adapters by blob, shared by every revision with its bytes).
      if (e.code() != ErrorCode::data_loss || id == blob_id) throw;
      throw Error(ErrorCode::data_loss, fmt::format("revision '{}': {}", id, e.what()));
    }
    decoded.weights.validate(base, source);
    return std::make_shared<const engine::LoraWeights>(std::move(decoded.weights));
  };
}

Loader::Loader(HostCache& cache, LoadFn load, LoaderOptions options)
    : thread_nice_(options.thread_nice), cache_(cache), load_(std::move(load)) {
  SPINDLE_CHECK(options.threads >= 1, invalid_argument, "loader: threads {} must be >= 1",
                options.threads);
  SPINDLE_CHECK(options.thread_nice >= 0 && options.thread_nice <= 19, invalid_argument,
                "loader: thread_nice {} must be in [0, 19]", options.thread_nice);
  SPINDLE_CHECK(static_cast<bool>(load_), invalid_argument, "loader: no load function");
  for (int32_t i = 0; i < options.threads; ++i) threads_.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (const QueueKey& key : queue_) {
      const std::string& id = std::get<2>(key);
      auto it = jobs_.find(id);
      it->second.promise.set_exception(std::make_exception_ptr(LoadCancelled(id)));
      jobs_.erase(it);
      ++stats_.cancelled;
    }
    queue_.clear();
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

LoadFuture Loader::request(const std::string& revision_id, int32_t priority) {
  std::lock_guard lock(mutex_);
  ++stats_.requests;
  if (auto it = jobs_.find(revision_id); it != jobs_.end()) {
    ++stats_.coalesced;
    Job& job = it->second;
    if (!job.running && -priority < std::get<0>(job.key)) {  // raise, keep request order
      queue_.erase(job.key);
      std::get<0>(job.key) = -priority;
      queue_.insert(job.key);
    }
    return job.future;
  }
  if (AdapterPtr hit = cache_.get(revision_id)) {
    ++stats_.cache_hits;
    std::promise<AdapterPtr> ready;
    ready.set_value(std::move(hit));
    return ready.get_future().share();
  }
  SPINDLE_CHECK(!stopping_, resource, "loader: shutting down, cannot load revision '{}'",
                revision_id);
  Job job;
  job.future = job.promise.get_future().share();
  job.key = QueueKey{-priority, next_seq_++, revision_id};
  job.created = Clock::now();
  queue_.insert(job.key);
  LoadFuture future = job.future;
  jobs_.emplace(revision_id, std::move(job));
  work_cv_.notify_one();
  return future;
}

bool Loader::cancel(const std::string& revision_id) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(revision_id);
  if (it == jobs_.end() || it->second.running) return false;
  queue_.erase(it->second.key);
  it->second.promise.set_exception(std::make_exception_ptr(LoadCancelled(revision_id)));
  jobs_.erase(it);
  ++stats_.cancelled;
  return true;
}

bool Loader::in_flight(const std::string& revision_id) const {
  std::lock_guard lock(mutex_);
  return jobs_.count(revision_id) != 0;
}

LoaderStats Loader::stats() const {
  std::lock_guard lock(mutex_);
  LoaderStats s = stats_;
  s.queue_depth = queue_.size();
  s.running = jobs_.size() - queue_.size();
  return s;
}

void Loader::worker_loop() {
  if (thread_nice_ > 0) {  // best effort: failure only loses the scheduling preference
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    ::setpriority(PRIO_PROCESS, tid, ::getpriority(PRIO_PROCESS, tid) + thread_nice_);
  }
  for (;;) {
    std::string id;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      id = std::get<2>(*queue_.begin());
      queue_.erase(queue_.begin());
      Job& job = jobs_.at(id);
      job.running = true;
      const double waited =
          std::chrono::duration<double, std::milli>(Clock::now() - job.created).count();
      ++stats_.loads_started;
      stats_.wait_ms_total += waited;
      stats_.wait_ms_max = std::max(stats_.wait_ms_max, waited);
    }
    // Outside the lock: the (slow) load, then the cache insert, so that a request arriving
    // after the job is erased below finds the adapter in the cache.
    AdapterPtr adapter;
    std::exception_ptr error;
    try {
      adapter = load_(id);
      SPINDLE_CHECK(adapter != nullptr, internal, "loader: load of revision '{}' returned null",
                    id);
      cache_.insert(id, adapter);
    } catch (...) {
      error = std::current_exception();
    }
    std::promise<AdapterPtr> promise;
    {
      std::lock_guard lock(mutex_);
      auto it = jobs_.find(id);
      promise = std::move(it->second.promise);
      jobs_.erase(it);
      ++(error ? stats_.loads_failed : stats_.loads_completed);
    }
    // Waiters wake outside the lock; they may call back into request() at once.
    if (error) {
      promise.set_exception(error);
    } else {
      promise.set_value(std::move(adapter));
    }
  }
}

}  // namespace spindle::adapters
