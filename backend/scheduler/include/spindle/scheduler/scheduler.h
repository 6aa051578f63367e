#pragma once
// The scheduler (DESIGN.md "scheduler/"): one engine thread that owns the model's mutable state
// (KV cache, slot pools, trainer, residency manager) and turns queued jobs from many clients
// into heterogeneous engine batches.
//
// Sampling: continuous batching across adapters. Each engine step runs one BatchRunner::forward over
// every running sequence's next token (decode) plus prompt chunks of newly admitted requests
// (prefill), at most `token_budget` tokens per step. The num_samples sequences of one request
// fork the prompt's KV sequence (shared blocks). Admission is fair across tenants (round robin
// over tenants with waiting work, FIFO within a tenant).
//
// Cold adapters: a sample job names its adapter by a residency key (the revision's blob id);
// acquire() on the residency manager either gives a slot (run now) or parks the job; parked
// jobs resume when take_landed() reports their key and fail with the load's error otherwise.
// The engine thread never waits on I/O; a slot is released only after the last sequence using
// it finished, so eviction never takes a slot that an in-flight batch uses.
//
// Training: each training session holds one slot of the training pool (Trainer state:
// master weights, gradients, AdamW). A session's jobs run in the order they were submitted.
// forward_backward jobs at the head of several sessions' queues with the same loss function
// and config run as ONE Trainer::forward_backward over all their data (K policies, one
// pass over the base); optim_step runs per session.
//
// Completion callbacks run on the engine thread: they must be quick and must not call back
// into the scheduler (the service forwards them to its socket thread).
//
// Threading: submit_*, open/close_session, stats() and stop() are safe from any thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "spindle/adapters/residency.h"
#include "spindle/core/all_reduce.h"
#include "spindle/core/error.h"
#include "spindle/engine/backend.h"
#include "spindle/engine/generator.h"
#include "spindle/engine/loss.h"
#include "spindle/engine/optimizer.h"
#include "spindle/engine/sampler.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/engine/trainer.h"

namespace spindle::scheduler {

// A failed job: `code` is the spindle::ErrorCode it failed with (resource, not_found, ...).
struct JobError {
  ErrorCode code = ErrorCode::internal;
  std::string message;
};

template <class T>
struct Outcome {
  std::optional<T> value;  // set on success
  JobError error;          // meaningful when !value
  bool ok() const { return value.has_value(); }
};

using SessionId = uint64_t;

// ---- sampling ------------------------------------------------------------------------------

// A sample or logprobs job with `session` set runs on that training session's CURRENT weights
// (its training-pool slot) instead of a served revision; adapter_key must then be empty. It is
// queued in the session's FIFO like a training job: it starts only after every job submitted
// to the session before it (so it sees an earlier optim_step or load), and a later optim_step,
// load or close of the session waits until it has finished (the weights it samples from never
// change under it). Consecutive session sample jobs run at once and batch with everything
// else; training-pool rows run as their own forward in the same engine step (decisions.md).
// New tokens of one sequence of a sample job since the job's previous progress call. Views into
// the engine thread's state: valid during the call only.
struct SampleDelta {
  int32_t sequence = 0;              // index among the job's num_samples
  std::span<const int32_t> tokens;   // k >= 1
  std::span<const float> logprobs;   // k
  // The token before tokens[0]: the sequence's previous token, or the prompt's last one for
  // its first delta (what a tokenizer's decode needs as `prev` to render tokens[0]).
  int32_t prev = -1;
};

struct SampleJob {
  std::string tenant;        // fairness key
  std::string adapter_key;   // residency key (blob id); "" = base model only
  std::optional<SessionId> session;  // sample from a training session's live weights
  std::vector<int32_t> prompt;
  int32_t num_samples = 1;
  engine::SamplingParams params;
  int32_t load_priority = adapters::kDefaultLoadPriority;
  std::function<void(Outcome<std::vector<engine::Completion>>)> done;
  // Optional streaming: called on the engine thread at the end of every engine step in which
  // some of the job's sequences got tokens, with one delta per such sequence (in sequence
  // order); the last call comes before a successful `done`, and a failed job gets no further
  // call. A sequence's deltas concatenate to its completion's tokens and logprobs (a stop token
  // included, as in the completion). Same rules as `done`: quick, no calls into the scheduler;
  // an exception it throws is swallowed.
  std::function<void(std::span<const SampleDelta>)> progress;
};

struct LogprobsJob {
  std::string tenant;
  std::string adapter_key;  // "" = base
  std::optional<SessionId> session;  // score with a training session's live weights
  std::vector<int32_t> tokens;
  // logprobs[i] = log p(tokens[i] | tokens[<i]); logprobs[0] = NaN.
  std::function<void(Outcome<std::vector<float>>)> done;
  // top_k > 0 (at most the vocabulary): on success, on_top_k gets, just before `done`, the
  // top_k most likely tokens at every position, row-major [n, top_k]: row i holds the most
  // likely values of tokens[i] given tokens[<i] (engine::top_logprobs), row 0 ids -1 and NaN.
  int32_t top_k = 0;
  std::function<void(std::vector<int32_t> ids, std::vector<float> logprobs)> on_top_k;
};

// ---- training ------------------------------------------------------------------------------

struct TrainBatchResult {
  std::vector<std::vector<float>> logprobs;  // per datum
  engine::LossMetrics metrics;               // this job's data only
};

// What save_weights / save_state need: the state between the session's earlier and later
// jobs, so a save sees exactly the steps submitted before it. Immutable: `weights` is
// Trainer::share_weights (on the CPU the trainer's own, which it copies before its next step).
struct SessionSnapshot {
  std::shared_ptr<const engine::LoraWeights> weights;
  std::shared_ptr<const engine::AdamW> optimizer;  // null unless with_optimizer
  int64_t step = 0;
};

struct SchedulerOptions {
  int64_t token_budget = 2048;        // tokens per engine step (prefill + decode)
  int32_t max_running = 256;          // sequences decoding at once
  size_t max_queued = 4096;           // jobs waiting (sampling + training) before refusal
  int32_t training_slots = 8;         // sessions training at once
  int32_t training_max_rank = 64;
  int64_t kv_blocks = 4096;           // KV cache blocks (block size 16)
  // Most tokens in one trainer call; 0 = token_budget. A merged forward_backward group larger
  // than this runs as several calls (gradients accumulate, so the result is the same), which
  // caps activation memory whatever the number of policies merged (a datum longer than the
  // cap gets a call of its own).
  int64_t train_tokens_per_pass = 0;
  // Called on the engine thread, with a message naming what threw, for every exception that
  // escapes a service callback (done, progress, top-k) or an engine step outside any job's own
  // error handling; the engine keeps running. Must be quick and must not call the scheduler.
  // The service logs it; unset, such faults are only counted (SchedulerStats::faults).
  std::function<void(const std::string&)> on_fault;
};

struct SchedulerStats {
  uint64_t queued = 0;     // admitted jobs not yet running
  uint64_t parked = 0;     // sample/logprob jobs waiting on a cold adapter
  uint64_t running_sequences = 0;
  uint64_t sessions = 0;
  uint64_t jobs_done = 0;
  uint64_t jobs_failed = 0;
  uint64_t engine_steps = 0;
  uint64_t sampled_tokens = 0;
  uint64_t train_passes = 0;          // passes over a (merged) group of forward_backward jobs
  uint64_t train_calls = 0;           // Trainer calls (a pass is chunked at the cap)
  uint64_t train_jobs_merged = 0;     // forward_backward jobs that shared a pass with another
  uint64_t session_sample_jobs = 0;   // sample/logprobs jobs run on a session's live weights
  uint64_t faults = 0;                // exceptions reported through SchedulerOptions::on_fault
  adapters::ResidencyStats residency;
  std::vector<adapters::RevisionPlacement> placements;
  int32_t device_slots = 0;
  int32_t device_slots_used = 0;
  // Where the engine runs and what it holds there (refreshed at most once a second).
  std::string device;   // "cpu", "cuda:0"
  std::string dtype;    // the resident base's: "F32", "BF16"
  engine::MemoryReport memory;  // base bytes, device free / total
  size_t kv_bytes = 0;
  size_t serving_pool_bytes = 0;
  size_t training_pool_bytes = 0;
};

class Scheduler {
 public:
  // backend, tokenizer (may be null), serving pool (made by `backend`) and residency manager
  // must outlive the scheduler; the residency manager must manage `serving_pool`. The engine
  // thread, started here, is the one thread that drives the backend from now on: the KV pool,
  // the runner, the training pool and its trainer are made by it on construction.
  Scheduler(engine::ExecutionBackend& backend, const engine::Tokenizer* tokenizer,
            engine::SlotPool& serving_pool, adapters::ResidencyManager& residency,
            SchedulerOptions options = {});
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Returns false (and does not call done) when the queue is full: the caller answers
  // `overloaded`. Jobs are validated on the engine thread; invalid ones fail through done.
  bool submit_sample(SampleJob job);
  bool submit_logprobs(LogprobsJob job);

  // Training sessions. open_session attaches `weights` (+ optimizer state) to a free training
  // slot; it fails with ErrorCode::resource when all training_slots are taken.
  //
  // With a data-parallel `group` (core/all_reduce.h; this rank of a policy trained on several
  // workers), every optim_step of the session first sums its gradients across the group
  // (Trainer::reduce_gradients). The sum blocks the engine thread until every rank arrives, so
  // the engine thread runs the optim_steps of its group sessions strictly in submission order,
  // each only after every older job of every group session here has run: when every rank's
  // jobs are submitted in one global order (the coordinator posts each step's forwards to all
  // ranks at once), no two workers ever wait on each other's steps in a cycle.
  void open_session(engine::LoraWeights weights, engine::AdamW optimizer,
                    std::function<void(Outcome<SessionId>)> done,
                    std::shared_ptr<AllReduce> group = {});
  void close_session(SessionId id, std::function<void(Outcome<bool>)> done);
  bool submit_forward_backward(SessionId id, std::vector<engine::TrainDatum> data,
                               engine::LossFn fn, engine::LossConfig config, bool backward,
                               std::function<void(Outcome<TrainBatchResult>)> done);
  bool submit_optim_step(SessionId id, engine::AdamParams params,
                         std::function<void(Outcome<engine::OptimStepResult>)> done);
  bool submit_snapshot(SessionId id, bool with_optimizer,
                       std::function<void(Outcome<SessionSnapshot>)> done);
  // Places `weights` in a serving slot (ResidencyManager::publish) on the engine thread, before
  // it takes any job submitted after this call, under a new provisional key, which it returns
  // ("" when stopping: nothing queued). A save publishes its snapshot this way before its
  // commit is durable, so the revision is servable the moment it is: submit_rekey(key, blob id)
  // then names the slot for the revision's requests, submit_rekey(key, "") frees it if the
  // save failed. A hint: with every slot held, the weights stay out. Not counted.
  std::string submit_publish(adapters::AdapterPtr weights);
  // ResidencyManager::rekey on the engine thread, before it takes any job submitted after
  // this call. Not counted against max_queued; false only when stopping.
  bool submit_rekey(std::string from, std::string to);
  // Replaces the session's weights (and optimizer state) in its slot (load_state).
  bool submit_load(SessionId id, engine::LoraWeights weights, engine::AdamW optimizer,
                   std::function<void(Outcome<int64_t>)> done);

  SchedulerStats stats() const;  // a copy refreshed by the engine thread each step

  // While an IntakeHold lives, the engine thread takes in no newly submitted job; when the last
  // hold ends, everything submitted meanwhile reaches the engine in ONE intake. A GRPO runner
  // holds intake while it submits every policy's forward_backward, so they are guaranteed to
  // merge into one pass. Keep holds short (a few submits): they delay every client.
  class IntakeHold {
   public:
    explicit IntakeHold(Scheduler& s);
    ~IntakeHold();
    IntakeHold(const IntakeHold&) = delete;
    IntakeHold& operator=(const IntakeHold&) = delete;

   private:
    Scheduler& s_;
  };

  // Stops admitting; with drain=true finishes every admitted job first, otherwise fails the
  // rest with ErrorCode::resource ("shutting down"). Joins the engine thread. Idempotent.
  void stop(bool drain = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spindle::scheduler
