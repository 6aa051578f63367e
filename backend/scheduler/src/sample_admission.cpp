// SampleBatcher: intake, tenant round robin, cold-adapter parking and KV-block planning.

#include <algorithm>
#include <limits>

#include "sample_batcher.h"
#include "spindle/core/error.h"

namespace spindle::scheduler::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void fail_sample_request(SampleRequest& r, const JobError& error, EngineCounters& counters,
                         WaitingCount& waiting) {
  waiting.leave(r.waiting);
  if (r.is_sample) {
    finish_err(r.sample.done, error, counters);
  } else {
    finish_err(r.logprobs.done, error, counters);
  }
}

void SampleBatcher::set_session_hooks(const engine::SlotPool* training_pool,
                                      std::function<void(SessionId)> session_done) {
  training_pool_ = training_pool;
  session_done_ = std::move(session_done);
}

void SampleBatcher::add(SampleRequestPtr request) {
  SampleRequest& r = *request;
  const engine::ModelConfig& c = config_;
  try {
    if (r.job_session()) {
      SPINDLE_CHECK(r.adapter_key().empty(), invalid_argument,
                    "a job for training session {} must not also name an adapter ('{}')",
                    *r.job_session(), r.adapter_key());
      SPINDLE_CHECK(r.train_slot >= 0 && training_pool_, internal,
                    "session job reached the batcher without its training slot");
    }
    if (r.is_sample) {
      engine::validate_sample_request(r.sample.prompt, r.sample.num_samples, r.sample.params, c,
                                      tokenizer_, "sample");
    } else {
      const auto& t = r.logprobs.tokens;
      SPINDLE_CHECK(!t.empty(), invalid_argument, "compute_logprobs: no tokens");
      SPINDLE_CHECK(int64_t(t.size()) <= c.max_seq_len, invalid_argument,
                    "compute_logprobs: {} tokens exceed the model's context of {}", t.size(),
                    c.max_seq_len);
      for (int32_t tok : t) {
        SPINDLE_CHECK(tok >= 0 && tok < c.vocab_size, invalid_argument,
                      "compute_logprobs: token {} outside vocab [0, {})", tok, c.vocab_size);
      }
      SPINDLE_CHECK(r.logprobs.top_k >= 0 && r.logprobs.top_k <= c.vocab_size, invalid_argument,
                    "compute_logprobs: top_k {} outside [0, vocab {}]", r.logprobs.top_k,
                    c.vocab_size);
    }
    const int64_t blocks = blocks_for(r);
    SPINDLE_CHECK(blocks <= cache_->n_blocks(), resource,
                  "job needs up to {} KV blocks of {} tokens; the cache has {} in all", blocks,
                  cache_->block_size(), cache_->n_blocks());
  } catch (...) {
    fail_request(r, current_job_error());
    return;
  }
  auto& q = queues_[r.tenant()];
  if (q.empty()) rr_.push_back(r.tenant());
  q.push_back(std::move(request));
}

void SampleBatcher::fail_request(SampleRequest& r, const JobError& error) {
  fail_sample_request(r, error, counters_, waiting_);
  notify_session(r);
}

void SampleBatcher::notify_session(SampleRequest& r) {
  if (!r.session) return;
  const SessionId id = *r.session;
  r.session.reset();  // exactly once
  if (session_done_) session_done_(id);
}

// Parked work goes back to the front of its tenant's queue: it was submitted before whatever
// that tenant queued since.
void SampleBatcher::requeue_front(SampleRequestPtr request) {
  auto& q = queues_[request->tenant()];
  if (q.empty()) rr_.push_back(request->tenant());
  q.push_front(std::move(request));
}

void SampleBatcher::handle_landed() {
  for (adapters::LandedLoad& landed : residency_.take_landed()) {
    auto it = parked_cold_.find(landed.revision_id);
    if (it == parked_cold_.end()) continue;
    std::vector<SampleRequestPtr> jobs = std::move(it->second);
    parked_cold_.erase(it);
    parked_count_ -= jobs.size();
    if (!landed.error.empty()) {
      for (auto& job : jobs) fail_request(*job, {landed.code, landed.error});
      continue;
    }
    for (auto r = jobs.rbegin(); r != jobs.rend(); ++r) requeue_front(std::move(*r));
  }
  if (released_slot_ && !parked_busy_.empty()) {
    std::vector<SampleRequestPtr> jobs = std::move(parked_busy_);
    parked_busy_.clear();
    parked_count_ -= jobs.size();
    for (auto r = jobs.rbegin(); r != jobs.rend(); ++r) requeue_front(std::move(*r));
  }
  released_slot_ = false;
}

// Worst case over the job's life: the prompt's blocks, plus per sample every block from the
// prompt's last partial one (copied on the first write) up to kv_cap tokens.
int64_t SampleBatcher::blocks_for(const SampleRequest& r) const {
  const int64_t B = cache_->block_size();
  const int64_t P = int64_t(r.input().size());
  if (!r.is_sample) return ceil_div(P, B);
  const int64_t cap =
      std::min(P + int64_t(r.sample.params.max_tokens), config_.max_seq_len);
  return ceil_div(P, B) + int64_t(r.sample.num_samples) * (ceil_div(cap, B) - P / B);
}

int64_t SampleBatcher::remaining_need(const Run& run) const {
  const SampleRequest& r = *run.req;
  const int64_t P = int64_t(r.input().size());
  if (run.feed_seq >= 0) {
    int64_t need = cache_->blocks_needed(run.feed_seq, P - run.fed);
    if (r.is_sample) {
      const int64_t B = cache_->block_size();
      need += int64_t(r.sample.num_samples) * (ceil_div(run.kv_cap, B) - P / B);
    }
    return need;
  }
  int64_t need = 0;
  for (const Seq& s : run.seqs) {
    if (!s.done)
      need += cache_->blocks_needed(s.seq, std::max<int64_t>(0, run.kv_cap - cache_->length(s.seq)));
  }
  return need;
}

uint64_t SampleBatcher::running_sequences() const {
  uint64_t n = 0;
  for (const Run& run : runs_) {
    if (!run.req->is_sample) continue;
    n += run.feed_seq >= 0 ? uint64_t(run.req->sample.num_samples) : uint64_t(run.live);
  }
  return n;
}

// Round robin over tenants with queued work, FIFO within a tenant. A job whose adapter is cold
// (or whose slot cannot be had now) parks without using the tenant's turn; admission stops at
// the first job the token budget, max_running or the KV cache cannot take now.
void SampleBatcher::admit(int64_t& budget, std::vector<Row>& main, std::vector<Row>& scored,
                          bool& changed) {
  if (rr_.empty() || budget <= 0) return;
  int64_t kv_free = cache_->free_blocks();
  for (const Run& run : runs_) kv_free -= remaining_need(run);
  int64_t running = int64_t(running_sequences());
  while (budget > 0 && !rr_.empty()) {
    const std::string tenant = rr_.front();
    auto& q = queues_[tenant];
    SampleRequest& r = *q.front();
    const int64_t need = blocks_for(r);
    const int64_t seqs = r.is_sample ? r.sample.num_samples : 0;
    if (need > kv_free) break;
    if (seqs > 0 && running > 0 && running + seqs > options_.max_running) break;

    int32_t slot = -1;
    bool holds = false;
    if (r.train_slot >= 0) {
      slot = r.train_slot;  // a session's live weights: no residency involved
    } else if (!r.adapter_key().empty()) {
      const uint64_t busy_before = residency_.stats().busy_parks;
      std::optional<int32_t> got;
      const int32_t priority = r.is_sample ? r.sample.load_priority : adapters::kDefaultLoadPriority;
      try {
        got = residency_.acquire(r.adapter_key(), priority);
      } catch (...) {
        SampleRequestPtr failed = std::move(q.front());
        q.pop_front();
        if (q.empty()) {
          queues_.erase(tenant);
          rr_.pop_front();
        }
        fail_request(*failed, current_job_error());
        changed = true;
        continue;
      }
      if (!got) {
        SampleRequestPtr parked = std::move(q.front());
        q.pop_front();
        if (q.empty()) {
          queues_.erase(tenant);
          rr_.pop_front();
        }
        ++parked_count_;
        if (residency_.stats().busy_parks != busy_before) {
          parked_busy_.push_back(std::move(parked));
        } else {
          const std::string key = parked->adapter_key();
          parked_cold_[key].push_back(std::move(parked));
        }
        continue;  // the tenant keeps its turn
      }
      slot = *got;
      holds = true;
    }

    Run run;
    run.req = std::move(q.front());
    q.pop_front();
    rr_.pop_front();
    if (q.empty()) {
      queues_.erase(tenant);
    } else {
      rr_.push_back(tenant);
    }
    waiting_.leave(run.req->waiting);
    run.slot = slot;
    run.holds_slot = holds;
    run.training_pool = run.req->train_slot >= 0;
    const int64_t P = int64_t(run.req->input().size());
    if (run.req->is_sample) {
      run.kv_cap = std::min(P + int64_t(run.req->sample.params.max_tokens),
                            config_.max_seq_len);
    } else {
      run.logprobs.assign(size_t(P), 0.0f);
      const size_t k = size_t(std::max(run.req->logprobs.top_k, 0));
      run.top_ids.assign(size_t(P) * k, -1);
      run.top_logprobs.assign(size_t(P) * k, std::numeric_limits<float>::quiet_NaN());
    }
    run.feed_seq = cache_->create();
    runs_.push_back(std::move(run));
    Run& added = runs_.back();
    kv_free -= need;
    running += seqs;
    changed = true;
    const int64_t n = std::min(P, budget);
    (added.req->is_sample ? main : scored).push_back({&added, -1, 0, n});
    budget -= n;
  }
}

}  // namespace spindle::scheduler::detail
