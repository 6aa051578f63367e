#include "job_common.h"

#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "spindle/core/error.h"

namespace spindle::scheduler::detail {

JobError current_job_error() {
  try {
    throw;
  } catch (const Error& e) {
    return {e.code(), e.what()};
  } catch (const std::bad_alloc&) {
    return {ErrorCode::resource, "out of memory while running the job"};
  } catch (const std::exception& e) {
    return {ErrorCode::internal, e.what()};
  } catch (...) {
    return {ErrorCode::internal, "unknown exception while running the job"};
  }
}

void note_fault(EngineCounters& counters, const char* where) noexcept {
  ++counters.faults;
  if (!counters.on_fault) return;
  try {
    const JobError e = current_job_error();
    counters.on_fault(fmt::format("engine thread: {} threw ({}): {}", where,
                                  error_code_name(e.code), e.message));
  } catch (...) {  // the reporter itself failed: the count above still tells
  }
}

JobError shutting_down_error() {
  return {ErrorCode::resource, "scheduler is shutting down: job was not run"};
}

}  // namespace spindle::scheduler::detail
