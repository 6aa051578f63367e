// SampleBatcher: building and running each engine step, and finishing jobs.

#include "sample_batcher.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "spindle/core/error.h"

namespace spindle::scheduler::detail {
namespace {

std::unique_ptr<engine::KvPool> make_kv(engine::ExecutionBackend& backend,
                                        const SchedulerOptions& options) {
  SPINDLE_CHECK(options.kv_blocks >= 1, invalid_argument,
                "scheduler kv_blocks must be >= 1, got {}", options.kv_blocks);
  return backend.make_kv_pool({.block_size = 16, .n_blocks = options.kv_blocks, .max_seqs = 1});
}

}  // namespace

SampleBatcher::SampleBatcher(engine::ExecutionBackend& backend, const engine::Tokenizer* tokenizer,
                             engine::SlotPool& pool, adapters::ResidencyManager& residency,
                             const SchedulerOptions& options, EngineCounters& counters,
                             WaitingCount& waiting)
    : config_(backend.config()),
      tokenizer_(tokenizer),
      pool_(pool),
      residency_(residency),
      options_(options),
      counters_(counters),
      waiting_(waiting),
      cache_(make_kv(backend, options)),
      runner_(backend.make_runner()) {
  SPINDLE_CHECK(options.token_budget >= 1, invalid_argument,
                "scheduler token_budget must be >= 1, got {}", options.token_budget);
  SPINDLE_CHECK(options.max_running >= 1, invalid_argument,
                "scheduler max_running must be >= 1, got {}", options.max_running);
}

SampleBatcher::~SampleBatcher() {
  for (Run& run : runs_) {
    try {
      release_run(run);
    } catch (...) {
    }
  }
}

bool SampleBatcher::step() {
  handle_landed();
  bool changed = false;
  std::vector<Row> main, scored;
  int64_t budget = options_.token_budget;
  for (Run& run : runs_) {  // decode rows are never held back
    for (size_t i = 0; i < run.seqs.size(); ++i) {
      if (!run.seqs[i].done) {
        main.push_back({&run, int32_t(i), 0, 1});
        --budget;
      }
    }
  }
  for (Run& run : runs_) {  // inputs admitted earlier and not yet all in the cache
    if (run.feed_seq < 0 || budget <= 0) continue;
    const int64_t left = int64_t(run.req->input().size()) - run.fed;
    const int64_t n = std::min(left, budget);
    (run.req->is_sample ? main : scored).push_back({&run, -1, run.fed, n});
    budget -= n;
  }
  admit(budget, main, scored, changed);
  if (!main.empty()) run_main(main);
  if (!scored.empty()) run_scored(scored);
  if (!main.empty() || !scored.empty()) {
    ++counters_.engine_steps;
    changed = true;
  }
  finish_runs();
  return changed;
}

// Rows are sorted by slot (stable) so each adapter's rows form one SGMV segment.
static void sort_by_slot(std::vector<std::pair<int32_t, size_t>>& order) {
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
}

// Serving rows and training-session rows read different slot pools, so each pool used gets its
// own forward in this step (both over the same KV cache).
void SampleBatcher::split_by_pool(const std::vector<Row>& rows, std::vector<Row>& serving,
                                  std::vector<Row>& training) {
  for (const Row& row : rows) (row.run->training_pool ? training : serving).push_back(row);
}

void SampleBatcher::run_main(const std::vector<Row>& rows) {
  std::vector<Row> serving, training;
  split_by_pool(rows, serving, training);
  if (!serving.empty()) forward_main(serving, &pool_);
  if (!training.empty()) forward_main(training, training_pool_);
}

void SampleBatcher::run_scored(const std::vector<Row>& rows) {
  std::vector<Row> serving, training;
  split_by_pool(rows, serving, training);
  if (!serving.empty()) forward_scored(serving, &pool_);
  if (!training.empty()) forward_scored(training, training_pool_);
}

void SampleBatcher::forward_main(std::vector<Row>& rows, const engine::SlotPool* pool) {
  std::vector<std::pair<int32_t, size_t>> order;
  for (size_t k = 0; k < rows.size(); ++k) order.push_back({rows[k].run->slot, k});
  sort_by_slot(order);
  decode_tokens_.assign(rows.size(), 0);
  std::vector<engine::BatchSequence> batch;
  batch.reserve(rows.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const Row& row = rows[order[k].second];
    Run& run = *row.run;
    if (row.seq_index >= 0) {
      const Seq& s = run.seqs[size_t(row.seq_index)];
      decode_tokens_[k] = s.stream.last_token();
      batch.push_back({s.seq, {&decode_tokens_[k], 1}, run.slot});
    } else {
      const auto& input = run.req->input();
      batch.push_back({run.feed_seq, {input.data() + row.start, size_t(row.n)}, run.slot});
    }
  }
  engine::LogitsView out;
  try {
    out = runner_->forward(batch, *cache_, pool, engine::LogitsFor::last_token);
  } catch (...) {
    const JobError error = current_job_error();
    for (Row& row : rows) fail_run(*row.run, error);
    return;
  }
  const int64_t vocab = config_.vocab_size;
  for (size_t k = 0; k < order.size(); ++k) {
    const Row& row = rows[order[k].second];
    Run& run = *row.run;
    if (run.finished) continue;
    const float* logits = out.row(int64_t(k));
    try {
      if (row.seq_index >= 0) {
        Seq& s = run.seqs[size_t(row.seq_index)];
        s.done = s.stream.accept(logits, vocab, cache_->length(s.seq), run.req->sample.params,
                                 tokenizer_, scratch_);
        ++counters_.sampled_tokens;
        if (s.done) {
          cache_->release(s.seq);
          s.seq = -1;
          --run.live;
        }
      } else {
        run.fed += row.n;
        if (run.fed == int64_t(run.req->input().size())) start_samples(run, logits);
      }
    } catch (...) {
      fail_run(run, current_job_error());
    }
  }
}

// The prompt is in the cache: fork it once per sample (sharing its blocks), sample each
// sample's first token from the prompt's last logits, then drop the prompt's own sequence.
void SampleBatcher::start_samples(Run& run, const float* logits) {
  const SampleJob& job = run.req->sample;
  const int64_t vocab = config_.vocab_size;
  run.seqs.resize(size_t(job.num_samples));
  for (int32_t n = 0; n < job.num_samples; ++n) {
    Seq& s = run.seqs[size_t(n)];
    s.stream = engine::SampleStream(job.params.seed, n, job.prompt.back(),
                                    config_.max_seq_len);
    if (job.params.max_tokens == 0) {
      s.done = true;
      continue;
    }
    s.seq = cache_->fork(run.feed_seq);
    ++run.live;
    s.done = s.stream.accept(logits, vocab, cache_->length(s.seq), job.params, tokenizer_,
                             scratch_);
    ++counters_.sampled_tokens;
    if (s.done) {
      cache_->release(s.seq);
      s.seq = -1;
      --run.live;
    }
  }
  cache_->release(run.feed_seq);
  run.feed_seq = -1;
}

// All-token forward over chunks of compute_logprobs inputs: the row of position i scores
// token i + 1, so a chunk's last row scores the first token of the next chunk.
void SampleBatcher::forward_scored(std::vector<Row>& rows, const engine::SlotPool* pool) {
  std::vector<std::pair<int32_t, size_t>> order;
  for (size_t k = 0; k < rows.size(); ++k) order.push_back({rows[k].run->slot, k});
  sort_by_slot(order);
  std::vector<engine::BatchSequence> batch;
  for (const auto& [slot, k] : order) {
    const Row& row = rows[k];
    const auto& input = row.run->req->input();
    batch.push_back({row.run->feed_seq, {input.data() + row.start, size_t(row.n)}, slot});
  }
  engine::LogitsView out;
  try {
    out = runner_->forward(batch, *cache_, pool, engine::LogitsFor::all_tokens);
  } catch (...) {
    const JobError error = current_job_error();
    for (Row& row : rows) fail_run(*row.run, error);
    return;
  }
  const int64_t vocab = config_.vocab_size;
  int64_t out_row = 0;
  for (const auto& [slot, k] : order) {
    const Row& row = rows[k];
    Run& run = *row.run;
    const auto& tokens = run.req->logprobs.tokens;
    const int32_t top_k = run.req->logprobs.top_k;
    for (int64_t i = row.start; i < row.start + row.n; ++i, ++out_row) {
      if (i + 1 < int64_t(tokens.size())) {
        run.logprobs[size_t(i + 1)] =
            engine::token_logprob(out.row(out_row), vocab, tokens[size_t(i + 1)]);
        if (top_k > 0) {
          const size_t at = size_t(i + 1) * size_t(top_k);
          engine::top_logprobs(out.row(out_row), vocab, top_k, &run.top_ids[at],
                               &run.top_logprobs[at]);
        }
      }
    }
    run.fed += row.n;
  }
}

void SampleBatcher::release_run(Run& run) {
  if (run.feed_seq >= 0) cache_->release(run.feed_seq);
  run.feed_seq = -1;
  for (Seq& s : run.seqs) {
    if (s.seq >= 0) cache_->release(s.seq);
    s.seq = -1;
  }
  run.live = 0;
  if (run.holds_slot) {
    run.holds_slot = false;
    residency_.release(run.slot);
    released_slot_ = true;
  }
}

void SampleBatcher::fail_run(Run& run, const JobError& error) {
  if (run.finished) return;
  run.finished = true;
  release_run(run);
  fail_request(*run.req, error);
}

// Tokens sampled since the last call, per sequence; nothing when no sequence got any.
void SampleBatcher::report_progress(Run& run) {
  const SampleJob& job = run.req->sample;
  if (!job.progress) return;
  std::vector<SampleDelta> deltas;
  for (size_t i = 0; i < run.seqs.size(); ++i) {
    Seq& s = run.seqs[i];
    const engine::Completion& c = s.stream.completion();
    if (c.tokens.size() <= s.reported) continue;
    const size_t k = c.tokens.size() - s.reported;
    const int32_t prev = s.reported > 0       ? c.tokens[s.reported - 1]
                         : job.prompt.empty() ? -1
                                              : job.prompt.back();
    deltas.push_back(
        {int32_t(i), {c.tokens.data() + s.reported, k}, {c.logprobs.data() + s.reported, k}, prev});
    s.reported = c.tokens.size();
  }
  if (deltas.empty()) return;
  try {
    job.progress(deltas);
  } catch (...) {
    note_fault(counters_, "a sample job's progress callback");
  }
}

void SampleBatcher::finish_runs() {
  for (auto it = runs_.begin(); it != runs_.end();) {
    Run& run = *it;
    if (!run.finished && run.req->is_sample) report_progress(run);
    if (!run.finished) {
      const int64_t P = int64_t(run.req->input().size());
      if (run.req->is_sample && run.feed_seq < 0 && run.live == 0) {
        std::vector<engine::Completion> out;
        out.reserve(run.seqs.size());
        for (Seq& s : run.seqs) out.push_back(s.stream.take());
        run.finished = true;
        release_run(run);
        if (run.training_pool) ++counters_.session_sample_jobs;
        finish_ok(run.req->sample.done, std::move(out), counters_);
        notify_session(*run.req);
      } else if (!run.req->is_sample && run.fed == P) {
        run.logprobs[0] = std::numeric_limits<float>::quiet_NaN();
        run.finished = true;
        release_run(run);
        if (run.training_pool) ++counters_.session_sample_jobs;
        if (run.req->logprobs.top_k > 0 && run.req->logprobs.on_top_k) {
          try {
            run.req->logprobs.on_top_k(std::move(run.top_ids), std::move(run.top_logprobs));
          } catch (...) {  // a callback's failure is its own (done still runs)
            note_fault(counters_, "a logprobs job's top-k callback");
          }
        }
        finish_ok(run.req->logprobs.done, std::move(run.logprobs), counters_);
        notify_session(*run.req);
      }
    }
    it = run.finished ? runs_.erase(it) : std::next(it);
  }
}

void SampleBatcher::fail_all(const JobError& error) {
  for (Run& run : runs_) fail_run(run, error);
  runs_.clear();
  for (auto& [tenant, q] : queues_) {
    for (auto& job : q) fail_request(*job, error);
  }
  queues_.clear();
  rr_.clear();
  for (auto& [key, jobs] : parked_cold_) {
    for (auto& job : jobs) fail_request(*job, error);
  }
  parked_cold_.clear();
  for (auto& job : parked_busy_) fail_request(*job, error);
  parked_busy_.clear();
  parked_count_ = 0;
}

}  // namespace spindle::scheduler::detail
