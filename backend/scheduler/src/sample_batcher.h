#pragma once
// The sampling half of the engine thread: tenant queues, cold-adapter parking, KV-block
// planning and continuous batching (scheduler.h describes the policy).
//
// Per step: take_landed() (resume or fail parked jobs), then one BatchRunner::forward (last_token
// logits) over a decode token of every running sequence plus prompt chunks of admitted sample
// jobs, and one all-token forward over token chunks of compute_logprobs jobs; together at most
// token_budget tokens, except that decode rows are never held back.
//
// KV invariant: free_blocks() >= the worst-case remaining need of every admitted job (prompt,
// forked samples up to max_tokens or the context end), so a running sequence never meets a
// full cache. Admission stops at the first job that does not fit now.
//
// Threading: engine thread only.

#include <cstdint>
#include <deque>
#include <list>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "job_common.h"
#include "spindle/engine/backend.h"
#include "spindle/engine/sample_stream.h"

namespace spindle::scheduler::detail {

// A submitted sample or compute_logprobs job.
struct SampleRequest {
  bool is_sample = true;
  SampleJob sample;       // is_sample
  LogprobsJob logprobs;   // !is_sample
  bool waiting = true;    // still counted in WaitingCount
  // Set when the job targets a training session (dispatched by TrainingSessions): the session
  // and its slot in the TRAINING pool. The session is told once when the job ends.
  std::optional<SessionId> session;
  int32_t train_slot = -1;
  const std::string& tenant() const { return is_sample ? sample.tenant : logprobs.tenant; }
  const std::string& adapter_key() const {
    return is_sample ? sample.adapter_key : logprobs.adapter_key;
  }
  const std::vector<int32_t>& input() const { return is_sample ? sample.prompt : logprobs.tokens; }
  const std::optional<SessionId>& job_session() const {
    return is_sample ? sample.session : logprobs.session;
  }
};
using SampleRequestPtr = std::unique_ptr<SampleRequest>;

// Fails a request that never reached a batcher (counts it, leaves WaitingCount, calls done).
void fail_sample_request(SampleRequest& request, const JobError& error, EngineCounters& counters,
                         WaitingCount& waiting);

class SampleBatcher {
 public:
  SampleBatcher(engine::ExecutionBackend& backend, const engine::Tokenizer* tokenizer,
                engine::SlotPool& pool, adapters::ResidencyManager& residency,
                const SchedulerOptions& options, EngineCounters& counters,
                WaitingCount& waiting);
  ~SampleBatcher();  // releases every sequence and slot still held (no callbacks)
  SampleBatcher(const SampleBatcher&) = delete;
  SampleBatcher& operator=(const SampleBatcher&) = delete;

  // Rows of session jobs run over `training_pool`; `session_done` is called (engine thread) once
  // per session job when it finished or failed. Set both before the first session job arrives.
  void set_session_hooks(const engine::SlotPool* training_pool,
                         std::function<void(SessionId)> session_done);

  // Validates and queues under the job's tenant; an invalid job fails through its done.
  void add(SampleRequestPtr request);
  // One engine step (see above). Returns false when nothing changed (no forward, no job
  // resumed, admitted or failed).
  bool step();
  // Fails every queued, parked and running job with `error` and frees their resources.
  void fail_all(const JobError& error);

  bool idle() const { return runs_.empty() && rr_.empty() && parked_count_ == 0; }
  size_t parked() const { return parked_count_; }
  uint64_t running_sequences() const;
  size_t kv_bytes() const { return cache_->bytes(); }

 private:
  struct Seq {
    engine::SeqId seq = -1;
    engine::SampleStream stream;
    bool done = false;
    size_t reported = 0;  // tokens already given to the job's progress callback
  };
  // An admitted job: its sequences hold KV blocks and its slot is held until it finishes.
  struct Run {
    SampleRequestPtr req;
    int32_t slot = -1;             // adapter slot, −1 = base
    bool training_pool = false;    // slot is in the training pool (a session job)
    bool holds_slot = false;       // acquired from the residency manager
    engine::SeqId feed_seq = -1;   // prompt (sample) or scored (logprobs) sequence while fed
    int64_t fed = 0;               // input tokens already in the cache
    int64_t kv_cap = 0;            // sample: longest length a sample's sequence can reach
    std::vector<Seq> seqs;         // sample: after the prompt is in
    int32_t live = 0;              // sample: sequences still decoding
    std::vector<float> logprobs;   // logprobs job
    std::vector<int32_t> top_ids;  // logprobs job with top_k: [P, top_k]
    std::vector<float> top_logprobs;
    bool finished = false;         // done was called (success or failure)
  };
  struct Row {
    Run* run = nullptr;
    int32_t seq_index = -1;  // decode row of run->seqs[i]; −1: a chunk of the input
    int64_t start = 0;       // chunk: first input position
    int64_t n = 1;
  };

  void handle_landed();
  void requeue_front(SampleRequestPtr request);
  void fail_request(SampleRequest& request, const JobError& error);
  void notify_session(SampleRequest& request);  // tells the session its job ended (once)
  void admit(int64_t& budget, std::vector<Row>& main, std::vector<Row>& scored, bool& changed);
  int64_t blocks_for(const SampleRequest& request) const;
  int64_t remaining_need(const Run& run) const;
  // Each splits its rows by pool and runs one forward per pool used.
  void run_main(const std::vector<Row>& rows);
  void run_scored(const std::vector<Row>& rows);
  static void split_by_pool(const std::vector<Row>& rows, std::vector<Row>& serving,
                            std::vector<Row>& training);
  void forward_main(std::vector<Row>& rows, const engine::SlotPool* pool);
  void forward_scored(std::vector<Row>& rows, const engine::SlotPool* pool);
  void start_samples(Run& run, const float* logits);
  void fail_run(Run& run, const JobError& error);
  void report_progress(Run& run);  // the job's progress callback, if it has one
  void finish_runs();
  void release_run(Run& run);

  const engine::ModelConfig& config_;
  const engine::Tokenizer* tokenizer_;
  engine::SlotPool& pool_;
  const engine::SlotPool* training_pool_ = nullptr;
  std::function<void(SessionId)> session_done_;
  adapters::ResidencyManager& residency_;
  SchedulerOptions options_;
  EngineCounters& counters_;
  WaitingCount& waiting_;
  std::unique_ptr<engine::KvPool> cache_;  // the backend's paged KV cache
  std::unique_ptr<engine::BatchRunner> runner_;
  std::vector<float> scratch_;
  std::vector<int32_t> decode_tokens_;

  // Admission: tenants with queued jobs in round-robin order, FIFO per tenant.
  std::unordered_map<std::string, std::deque<SampleRequestPtr>> queues_;
  std::deque<std::string> rr_;
  // Parked: by adapter key, waiting for its load to land (cold) or for a slot release (busy).
  std::unordered_map<std::string, std::vector<SampleRequestPtr>> parked_cold_;
  std::vector<SampleRequestPtr> parked_busy_;
  size_t parked_count_ = 0;
  bool released_slot_ = false;  // a slot was released since busy-parked jobs last retried
  std::list<Run> runs_;         // admission order
};

}  // namespace spindle::scheduler::detail
