#pragma once
// The training half of the engine thread: sessions in the training pool's slots, each with a
// FIFO of jobs. A pass runs the non-merging jobs at the heads of the queues (optim_step,
// snapshot, load, close) and then ONE Trainer call over every session whose head is a
// forward / forward_backward with the same (loss fn, config, backward): the group of the oldest
// such head. Each merged job gets its own logprobs and metrics.
//
// Session sample/logprobs jobs (SampleJob::session) sit in the same FIFO. At the head they are
// handed to the SampleBatcher (dispatch hook) with the session's training slot, and counted
// in flight; consecutive ones all go at once. optim_step, load and close wait at the head
// until the session has no job in flight, so sampling never sees weights change mid-sequence;
// forward_backward and snapshot do not change the slot and need not wait.
//
// Data-parallel sessions (a group: scheduler.h's open_session): their optim_step sums the
// gradients across the group's ranks first, which blocks until every rank arrives; such a step
// runs only when it is the oldest queued job of every group session, so group steps run in
// submission order.
//
// Threading: engine thread only.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "job_common.h"
#include "sample_batcher.h"

namespace spindle::scheduler::detail {

struct TrainRequest {
  enum class Kind : uint8_t { forward_backward, optim_step, snapshot, load, close, sample };
  Kind kind = Kind::forward_backward;
  SessionId session = 0;
  uint64_t order = 0;  // submission order (oldest head first)
  bool waiting = true;  // counted in WaitingCount (close is not)
  // forward_backward
  std::vector<engine::TrainDatum> data;
  engine::LossFn fn = engine::LossFn::cross_entropy;
  engine::LossConfig config;
  bool backward = true;
  std::function<void(Outcome<TrainBatchResult>)> fb_done;
  // optim_step
  engine::AdamParams adam;
  std::function<void(Outcome<engine::OptimStepResult>)> step_done;
  // snapshot
  bool with_optimizer = false;
  std::function<void(Outcome<SessionSnapshot>)> snapshot_done;
  // load (and open_session)
  engine::LoraWeights weights;
  engine::AdamW optimizer;
  std::function<void(Outcome<int64_t>)> load_done;
  // close
  std::function<void(Outcome<bool>)> close_done;
  // sample (a sample or logprobs job on the session's live weights; it carries the waiting
  // count, this wrapper does not)
  SampleRequestPtr sample;
};
using TrainRequestPtr = std::unique_ptr<TrainRequest>;

struct OpenRequest {
  engine::LoraWeights weights;
  engine::AdamW optimizer;
  std::shared_ptr<AllReduce> group;  // data-parallel rank (Scheduler::open_session)
  std::function<void(Outcome<SessionId>)> done;
};

class TrainingSessions {
 public:
  TrainingSessions(engine::ExecutionBackend& backend, const SchedulerOptions& options,
                   EngineCounters& counters, WaitingCount& waiting);

  // `dispatch` receives session sample jobs that reached their session's head (engine thread;
  // it may call sample_done synchronously).
  void set_dispatch(std::function<void(SampleRequestPtr)> dispatch) {
    dispatch_ = std::move(dispatch);
  }
  // A dispatched job of session `id` ended (success or failure).
  void sample_done(SessionId id);
  const engine::SlotPool& pool() const { return *pool_; }

  void open(OpenRequest request);
  // Queues a job on its session; a job for an unknown or closing session fails (not_found).
  void add(TrainRequestPtr request);
  // One pass (see above); false when no session had work.
  bool pass();
  void fail_all(const JobError& error);

  bool idle() const;
  size_t sessions() const { return sessions_.size(); }

 private:
  struct Session {
    int32_t slot = -1;
    bool closing = false;  // a close is queued: later jobs are refused
    int64_t in_flight = 0;  // dispatched sample jobs not yet ended
    std::deque<TrainRequestPtr> jobs;
    std::shared_ptr<AllReduce> group;  // data-parallel: optim_step sums gradients over it
  };
  // The submission order of the oldest queued job of any data-parallel session (UINT64_MAX =
  // none): a group session's optim_step runs only when it is that job.
  uint64_t oldest_group_job() const;
  void fail(TrainRequest& request, const JobError& error);
  // Runs a non-merging job at a session's head; returns false when the session was closed.
  bool run_single(Session& session, TrainRequest& request);
  void run_group(const std::vector<SessionId>& ids);
  void run_merged(const std::vector<TrainRequest*>& jobs, const std::vector<int32_t>& slots);

  const engine::ModelConfig& config_;
  int64_t tokens_per_pass_;  // trainer call cap (SchedulerOptions::train_tokens_per_pass)
  EngineCounters& counters_;
  WaitingCount& waiting_;
  std::unique_ptr<engine::SlotPool> pool_;
  std::unique_ptr<engine::Trainer> trainer_;
  std::vector<bool> slot_used_;
  std::map<SessionId, Session> sessions_;
  SessionId next_id_ = 1;
  std::function<void(SampleRequestPtr)> dispatch_;
};

}  // namespace spindle::scheduler::detail
