#pragma once
// Pieces shared by the scheduler's sampling and training halves: counters, turning exceptions
// into JobErrors, and calling completion callbacks so that neither a failing job nor a throwing
// callback can take the engine thread down.
//
// Threading: everything here is used by the engine thread only, except `waiting` (atomic).

#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>
#include <string>

#include "spindle/scheduler/scheduler.h"

namespace spindle::scheduler::detail {

struct EngineCounters {
  uint64_t jobs_done = 0;
  uint64_t jobs_failed = 0;
  uint64_t engine_steps = 0;
  uint64_t sampled_tokens = 0;
  uint64_t train_passes = 0;
  uint64_t train_calls = 0;
  uint64_t train_jobs_merged = 0;
  uint64_t session_sample_jobs = 0;
  // Exceptions that escaped a callback or a step outside any job's own error handling: each is
  // counted here and handed to on_fault (SchedulerOptions::on_fault), never swallowed silently.
  uint64_t faults = 0;
  std::function<void(const std::string&)> on_fault;
};

// Counts and reports the exception being handled (call only inside a catch block), `where`
// naming what threw ("a sample job's done callback"). Never throws.
void note_fault(EngineCounters& counters, const char* where) noexcept;

// The JobError for the exception being handled; call only inside a catch block. spindle::Error
// keeps its code; std::bad_alloc is `resource`; anything else (a kernel's invalid_argument is a
// caller bug, decisions.md) is `internal`.
JobError current_job_error();

JobError shutting_down_error();

// Counts a submitted job that has not started yet (sampling: admitted to a batch; training:
// executed). Each job leaves it exactly once: through leave() when it starts or finishes.
class WaitingCount {
 public:
  std::atomic<size_t>& value() { return n_; }
  size_t get() const { return n_.load(std::memory_order_relaxed); }
  void leave(bool& waiting) {
    if (waiting) {
      waiting = false;
      n_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

 private:
  std::atomic<size_t> n_{0};
};

// Calls `done` (if set) with a value or an error and counts the outcome. A callback that throws
// is a fault (note_fault): callbacks belong to the service and must not stop the engine.
template <class T>
void finish_ok(const std::function<void(Outcome<T>)>& done, T value, EngineCounters& counters) {
  ++counters.jobs_done;
  if (!done) return;
  Outcome<T> out;
  out.value = std::move(value);
  try {
    done(std::move(out));
  } catch (...) {
    note_fault(counters, "a job's done callback");
  }
}

template <class T>
void finish_err(const std::function<void(Outcome<T>)>& done, JobError error,
                EngineCounters& counters) {
  ++counters.jobs_failed;
  if (!done) return;
  Outcome<T> out;
  out.error = std::move(error);
  try {
    done(std::move(out));
  } catch (...) {
    note_fault(counters, "a job's done callback");
  }
}

}  // namespace spindle::scheduler::detail
