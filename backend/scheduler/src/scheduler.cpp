// Scheduler: the job queue shared with submitters, the engine thread's loop, stop and stats.

#include "spindle/scheduler/scheduler.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <variant>

#include "sample_batcher.h"
#include "training_sessions.h"

namespace spindle::scheduler {

using detail::OpenRequest;
using detail::SampleRequest;
using detail::SampleRequestPtr;
using detail::TrainRequest;
using detail::TrainRequestPtr;

// submit_rekey: rename a published serving slot.
struct RekeyRequest {
  std::string from, to;
};
// submit_publish: weights into a serving slot under a provisional key.
struct PublishRequest {
  std::string key;
  adapters::AdapterPtr weights;
};

struct Scheduler::Impl {
  using Incoming = std::variant<SampleRequestPtr, TrainRequestPtr, std::unique_ptr<OpenRequest>,
                                RekeyRequest, PublishRequest>;

  Impl(engine::ExecutionBackend& backend, const engine::Tokenizer* tokenizer,
       engine::SlotPool& serving_pool, adapters::ResidencyManager& residency,
       SchedulerOptions options)
      : options_(options),
        backend_(backend),
        serving_pool_(serving_pool),
        residency_(residency),
        batcher_(backend, tokenizer, serving_pool, residency, options, counters_, waiting_),
        training_(backend, options, counters_, waiting_),
        device_(backend.device().name()),
        dtype_(dtype_name(backend.dtype())),
        memory_(backend.memory()),
        memory_at_(std::chrono::steady_clock::now()) {
    counters_.on_fault = options_.on_fault;
    batcher_.set_session_hooks(&training_.pool(),
                               [this](SessionId id) { training_.sample_done(id); });
    training_.set_dispatch([this](SampleRequestPtr r) { batcher_.add(std::move(r)); });
  }

  // Engine thread: a save's snapshot into a serving slot (submit_publish). A hint:
  // with every slot held, or an adapter the pool refuses (reported), the revision stays cold.
  void publish(const std::string& key, adapters::AdapterPtr weights) noexcept {
    try {
      residency_.publish(key, std::move(weights));
    } catch (...) {
      detail::note_fault(counters_, "publishing a saved revision into a serving slot");
    }
  }

  // Queues a job; false when stopping or (for counted jobs) max_queued jobs are waiting.
  bool push(Incoming job, bool counted) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return false;
      if (counted) {
        if (waiting_.get() >= options_.max_queued) return false;
        waiting_.value().fetch_add(1, std::memory_order_relaxed);
      }
      incoming_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
  }

  // Moves submitted jobs to their owners; returns (stopping, drain).
  std::pair<bool, bool> intake() {
    std::vector<Incoming> jobs;
    bool stopping = false, drain = true;
    {
      std::lock_guard lock(mutex_);
      if (holds_ == 0 || stopping_) jobs.swap(incoming_);
      stopping = stopping_;
      drain = drain_;
    }
    for (Incoming& job : jobs) {
      if (auto* s = std::get_if<SampleRequestPtr>(&job)) {
        batcher_.add(std::move(*s));
      } else if (auto* t = std::get_if<TrainRequestPtr>(&job)) {
        training_.add(std::move(*t));
      } else if (auto* k = std::get_if<RekeyRequest>(&job)) {
        try {
          residency_.rekey(k->from, k->to);
        } catch (...) {
          detail::note_fault(counters_, "renaming a published serving slot");
        }
      } else if (auto* p = std::get_if<PublishRequest>(&job)) {
        publish(p->key, std::move(p->weights));
      } else {
        training_.open(std::move(*std::get<std::unique_ptr<OpenRequest>>(job)));
      }
    }
    return {stopping, drain};
  }

  void publish() {
    SchedulerStats s;
    s.parked = batcher_.parked();
    const size_t waiting = waiting_.get();
    s.queued = waiting > s.parked ? waiting - s.parked : 0;
    s.running_sequences = batcher_.running_sequences();
    s.sessions = training_.sessions();
    s.jobs_done = counters_.jobs_done;
    s.jobs_failed = counters_.jobs_failed;
    s.engine_steps = counters_.engine_steps;
    s.sampled_tokens = counters_.sampled_tokens;
    s.train_passes = counters_.train_passes;
    s.train_calls = counters_.train_calls;
    s.train_jobs_merged = counters_.train_jobs_merged;
    s.session_sample_jobs = counters_.session_sample_jobs;
    s.faults = counters_.faults;
    s.residency = residency_.stats();
    // Every step while few revisions are placed; past that (a host cache of thousands of
    // revisions) at most 10 times a second: the list is O(revisions) strings, and rebuilding
    // it after every step was a tenth of the engine thread under a storm of cold loads.
    // Not copied when not rebuilt: the published list stays in stats_.
    const auto now = std::chrono::steady_clock::now();
    std::optional<std::vector<adapters::RevisionPlacement>> placements;
    if (residency_.known_count() <= kFreshPlacements ||
        now - placements_at_ >= std::chrono::milliseconds(100)) {
      placements = residency_.snapshot();
      placements_at_ = now;
    }
    s.device_slots = serving_pool_.max_slots();
    for (int32_t slot = 0; slot < serving_pool_.max_slots(); ++slot) {
      s.device_slots_used += serving_pool_.occupied(slot) ? 1 : 0;
    }
    // Free device memory is a driver (or /proc) query: refreshed at most once a second. The
    // device, dtype and pool sizes never change.
    if (now - memory_at_ >= std::chrono::seconds(1)) {
      try {
        memory_ = backend_.memory();
      } catch (...) {  // a report is best-effort: stats keep the last one
      }
      memory_at_ = now;
    }
    s.device = device_;
    s.dtype = dtype_;
    s.memory = memory_;
    s.kv_bytes = batcher_.kv_bytes();
    s.serving_pool_bytes = serving_pool_.bytes();
    s.training_pool_bytes = training_.pool().bytes();
    std::lock_guard lock(stats_mutex_);
    s.placements = placements ? std::move(*placements) : std::move(stats_.placements);
    stats_ = std::move(s);
  }

  // The engine thread. Alternates one sampling step and one training pass; sleeps when
  // neither has work, polling take_landed() every millisecond while jobs are parked.
  void loop() {
    for (;;) {
      bool stopping = false, drain = true;
      try {
        std::tie(stopping, drain) = intake();
        if (stopping && !drain) {
          batcher_.fail_all(detail::shutting_down_error());
          training_.fail_all(detail::shutting_down_error());
          publish();
          return;
        }
        bool worked = batcher_.step();
        worked = training_.pass() || worked;
        publish();
        if (stopping && batcher_.idle() && training_.idle()) {
          std::lock_guard lock(mutex_);
          if (incoming_.empty()) return;
          continue;
        }
        if (worked) continue;
      } catch (...) {
        // A bug outside any job's own error handling: report it, keep the engine alive.
        detail::note_fault(counters_, "an engine step");
        try {
          publish();
        } catch (...) {
        }
      }
      std::unique_lock lock(mutex_);
      const auto ready = [&] {
        return (!incoming_.empty() && holds_ == 0) || (stopping_ && !stopping);
      };
      if (batcher_.parked() > 0) {
        cv_.wait_for(lock, std::chrono::milliseconds(1), ready);
      } else {
        cv_.wait(lock, ready);
      }
    }
  }

  SchedulerOptions options_;
  engine::ExecutionBackend& backend_;
  engine::SlotPool& serving_pool_;
  adapters::ResidencyManager& residency_;
  detail::EngineCounters counters_;  // engine thread
  detail::WaitingCount waiting_;
  detail::SampleBatcher batcher_;       // engine thread
  detail::TrainingSessions training_;  // engine thread
  const std::string device_;  // backend.device().name(), fixed
  const std::string dtype_;
  engine::MemoryReport memory_;  // engine thread, refreshed by publish()
  std::chrono::steady_clock::time_point memory_at_;
  static constexpr size_t kFreshPlacements = 256;  // placed revisions listed after every step
  std::chrono::steady_clock::time_point placements_at_;  // engine thread: the last rebuild

  std::mutex mutex_;  // guards incoming_, stopping_, drain_, joined_
  std::condition_variable cv_;
  std::vector<Incoming> incoming_;
  bool stopping_ = false;
  bool drain_ = true;
  int holds_ = 0;  // live IntakeHolds
  std::once_flag join_once_;
  std::atomic<uint64_t> next_order_{0};
  // submit_publish's provisional keys: "pending-save/<instance>/<n>". The random instance makes
  // them unique across processes too: a cluster worker restarted under its name counts from 0
  // again, and a rename its previous process was sent must not find a new save's slot.
  const uint64_t instance_ = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  std::atomic<uint64_t> next_publish_{0};

  mutable std::mutex stats_mutex_;
  SchedulerStats stats_;  // guarded by stats_mutex_

  std::thread thread_;
};

Scheduler::Scheduler(engine::ExecutionBackend& backend, const engine::Tokenizer* tokenizer,
                     engine::SlotPool& serving_pool, adapters::ResidencyManager& residency,
                     SchedulerOptions options)
    : impl_(std::make_unique<Impl>(backend, tokenizer, serving_pool, residency, options)) {
  impl_->publish();
  impl_->thread_ = std::thread([this] { impl_->loop(); });
}

Scheduler::~Scheduler() { stop(); }

namespace {

// A job for a training session enters the session's FIFO (wrapped in a TrainRequest that does
// not count itself: the sample request carries the waiting count).
TrainRequestPtr session_wrapper(SampleRequestPtr r, SessionId id, uint64_t order) {
  auto t = std::make_unique<TrainRequest>();
  t->kind = TrainRequest::Kind::sample;
  t->session = id;
  t->order = order;
  t->waiting = false;
  t->sample = std::move(r);
  return t;
}

}  // namespace

bool Scheduler::submit_sample(SampleJob job) {
  auto r = std::make_unique<SampleRequest>();
  r->is_sample = true;
  r->sample = std::move(job);
  if (const auto id = r->sample.session) {
    return impl_->push(session_wrapper(std::move(r), *id, impl_->next_order_++), true);
  }
  return impl_->push(std::move(r), /*counted=*/true);
}

bool Scheduler::submit_logprobs(LogprobsJob job) {
  auto r = std::make_unique<SampleRequest>();
  r->is_sample = false;
  r->logprobs = std::move(job);
  if (const auto id = r->logprobs.session) {
    return impl_->push(session_wrapper(std::move(r), *id, impl_->next_order_++), true);
  }
  return impl_->push(std::move(r), /*counted=*/true);
}

bool Scheduler::submit_rekey(std::string from, std::string to) {
  return impl_->push(RekeyRequest{std::move(from), std::move(to)}, /*counted=*/false);
}

void Scheduler::open_session(engine::LoraWeights weights, engine::AdamW optimizer,
                             std::function<void(Outcome<SessionId>)> done,
                             std::shared_ptr<AllReduce> group) {
  auto r = std::make_unique<OpenRequest>();
  r->weights = std::move(weights);
  r->optimizer = std::move(optimizer);
  r->group = std::move(group);
  const auto refused = done;  // a copy: the job (and its callback) is dropped if refused
  r->done = std::move(done);
  if (!impl_->push(std::move(r), /*counted=*/false) && refused) {
    refused(Outcome<SessionId>{std::nullopt, detail::shutting_down_error()});
  }
}

namespace {

TrainRequestPtr train_request(TrainRequest::Kind kind, SessionId id, uint64_t order) {
  auto r = std::make_unique<TrainRequest>();
  r->kind = kind;
  r->session = id;
  r->order = order;
  return r;
}

}  // namespace

void Scheduler::close_session(SessionId id, std::function<void(Outcome<bool>)> done) {
  auto r = train_request(TrainRequest::Kind::close, id, impl_->next_order_++);
  r->waiting = false;
  r->close_done = done;
  if (!impl_->push(std::move(r), /*counted=*/false) && done) {
    done(Outcome<bool>{std::nullopt, detail::shutting_down_error()});
  }
}

bool Scheduler::submit_forward_backward(SessionId id, std::vector<engine::TrainDatum> data,
                                        engine::LossFn fn, engine::LossConfig config,
                                        bool backward,
                                        std::function<void(Outcome<TrainBatchResult>)> done) {
  auto r = train_request(TrainRequest::Kind::forward_backward, id, impl_->next_order_++);
  r->data = std::move(data);
  r->fn = fn;
  r->config = config;
  r->backward = backward;
  r->fb_done = std::move(done);
  return impl_->push(std::move(r), /*counted=*/true);
}

bool Scheduler::submit_optim_step(SessionId id, engine::AdamParams params,
                                  std::function<void(Outcome<engine::OptimStepResult>)> done) {
  auto r = train_request(TrainRequest::Kind::optim_step, id, impl_->next_order_++);
  r->adam = params;
  r->step_done = std::move(done);
  return impl_->push(std::move(r), /*counted=*/true);
}

bool Scheduler::submit_snapshot(SessionId id, bool with_optimizer,
                                std::function<void(Outcome<SessionSnapshot>)> done) {
  auto r = train_request(TrainRequest::Kind::snapshot, id, impl_->next_order_++);
  r->with_optimizer = with_optimizer;
  r->snapshot_done = std::move(done);
  return impl_->push(std::move(r), /*counted=*/true);
}

std::string Scheduler::submit_publish(adapters::AdapterPtr weights) {
  std::string key =
      fmt::format("pending-save/{:016x}/{}", impl_->instance_, impl_->next_publish_++);
  if (!impl_->push(PublishRequest{key, std::move(weights)}, /*counted=*/false)) return "";
  return key;
}

bool Scheduler::submit_load(SessionId id, engine::LoraWeights weights, engine::AdamW optimizer,
                            std::function<void(Outcome<int64_t>)> done) {
  auto r = train_request(TrainRequest::Kind::load, id, impl_->next_order_++);
  r->weights = std::move(weights);
  r->optimizer = std::move(optimizer);
  r->load_done = std::move(done);
  return impl_->push(std::move(r), /*counted=*/true);
}

Scheduler::IntakeHold::IntakeHold(Scheduler& s) : s_(s) {
  std::lock_guard lock(s_.impl_->mutex_);
  ++s_.impl_->holds_;
}

Scheduler::IntakeHold::~IntakeHold() {
  {
    std::lock_guard lock(s_.impl_->mutex_);
    --s_.impl_->holds_;
  }
  s_.impl_->cv_.notify_one();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(impl_->stats_mutex_);
  return impl_->stats_;
}

void Scheduler::stop(bool drain) {
  {
    std::lock_guard lock(impl_->mutex_);
    if (!impl_->stopping_) {
      impl_->stopping_ = true;
      impl_->drain_ = drain;
    }
  }
  impl_->cv_.notify_all();
  std::call_once(impl_->join_once_, [&] {
    if (impl_->thread_.joinable()) impl_->thread_.join();
  });
}

}  // namespace spindle::scheduler
