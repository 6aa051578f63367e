#include "training_sessions.h"

#include <algorithm>
#include <optional>
#include <span>

#include "spindle/core/error.h"

namespace spindle::scheduler::detail {
namespace {

// The trainer validates a whole batch at once; a merged batch is checked job by job first so
// that one job's bad data fails only that job.
void validate_job(const TrainRequest& r, const engine::ModelConfig& c) {
  SPINDLE_CHECK(!r.data.empty(), invalid_argument, "forward_backward: no data");
  r.config.validate();
  for (size_t i = 0; i < r.data.size(); ++i) {
    const engine::TrainDatum& d = r.data[i];
    SPINDLE_CHECK(!d.input_tokens.empty(), invalid_argument, "datum {}: no input tokens", i);
    SPINDLE_CHECK(int64_t(d.input_tokens.size()) <= c.max_seq_len, invalid_argument,
                  "datum {}: {} tokens exceed the model's context of {}", i,
                  d.input_tokens.size(), c.max_seq_len);
    SPINDLE_CHECK(d.target_tokens.size() == d.input_tokens.size(), invalid_argument,
                  "datum {}: {} target tokens for {} input tokens (must be equal)", i,
                  d.target_tokens.size(), d.input_tokens.size());
    for (const auto* tokens : {&d.input_tokens, &d.target_tokens}) {
      for (int32_t t : *tokens) {
        SPINDLE_CHECK(t >= 0 && t < c.vocab_size, invalid_argument,
                      "datum {}: token {} outside vocab [0, {})", i, t, c.vocab_size);
      }
    }
    engine::validate_loss_inputs(r.fn, {d.target_tokens, d.weights, d.logprobs, d.advantages},
                                 i);
  }
}

bool same_group(const TrainRequest& a, const TrainRequest& b) {
  return a.fn == b.fn && a.backward == b.backward &&
         a.config.clip_low_threshold == b.config.clip_low_threshold &&
         a.config.clip_high_threshold == b.config.clip_high_threshold &&
         a.config.beta == b.config.beta;
}

// A job's metrics from its own data's logprobs, with the trainer's per-token loss.
engine::LossMetrics job_metrics(std::span<const engine::TrainDatum> data,
                                std::span<const std::vector<float>> logprobs, engine::LossFn fn,
                                const engine::LossConfig& config) {
  engine::LossMetrics m;
  for (size_t i = 0; i < data.size(); ++i) {
    const engine::TrainDatum& d = data[i];
    for (size_t t = 0; t < d.target_tokens.size(); ++t) {
      const float w = d.weights.empty() ? 1.0f : d.weights[t];
      if (w == 0.0f) continue;
      const float q = d.logprobs.empty() ? 0.0f : d.logprobs[t];
      const float a = d.advantages.empty() ? 0.0f : d.advantages[t];
      const engine::TokenLoss tl = engine::token_loss(fn, config, logprobs[i][t], w, q, a);
      m.loss += tl.loss;
      m.n_tokens += 1;
      m.n_clipped += tl.clipped ? 1 : 0;
    }
  }
  return m;
}

}  // namespace

TrainingSessions::TrainingSessions(engine::ExecutionBackend& backend,
                                   const SchedulerOptions& options, EngineCounters& counters,
                                   WaitingCount& waiting)
    : config_(backend.config()),
      tokens_per_pass_(options.train_tokens_per_pass > 0 ? options.train_tokens_per_pass
                                                         : std::max<int64_t>(options.token_budget, 1)),
      counters_(counters),
      waiting_(waiting),
      pool_(backend.make_slot_pool(
          {.max_slots = options.training_slots, .max_rank = options.training_max_rank})),
      trainer_(backend.make_trainer(*pool_)),
      slot_used_(size_t(std::max(options.training_slots, 0)), false) {}

void TrainingSessions::open(OpenRequest r) {
  const auto free = std::find(slot_used_.begin(), slot_used_.end(), false);
  if (free == slot_used_.end()) {
    finish_err(r.done,
               {ErrorCode::resource, fmt::format("all {} training slots are taken by open "
                                                 "sessions; close one first",
                                                 slot_used_.size())},
               counters_);
    return;
  }
  const int32_t slot = int32_t(free - slot_used_.begin());
  try {
    r.weights.validate(config_, "session adapter");
    trainer_->attach(slot, std::move(r.weights), std::move(r.optimizer));
  } catch (...) {
    finish_err(r.done, current_job_error(), counters_);
    return;
  }
  slot_used_[size_t(slot)] = true;
  const SessionId id = next_id_++;
  sessions_[id].slot = slot;
  sessions_[id].group = std::move(r.group);
  finish_ok(r.done, id, counters_);
}

void TrainingSessions::add(TrainRequestPtr r) {
  auto it = sessions_.find(r->session);
  if (it == sessions_.end() || it->second.closing) {
    fail(*r, {ErrorCode::not_found, fmt::format("training session {} is not open", r->session)});
    return;
  }
  if (r->kind == TrainRequest::Kind::close) it->second.closing = true;
  it->second.jobs.push_back(std::move(r));
}

bool TrainingSessions::idle() const {
  return std::all_of(sessions_.begin(), sessions_.end(),
                     [](const auto& s) { return s.second.jobs.empty(); });
}

void TrainingSessions::sample_done(SessionId id) {
  auto it = sessions_.find(id);
  if (it != sessions_.end() && it->second.in_flight > 0) --it->second.in_flight;
}

void TrainingSessions::fail(TrainRequest& r, const JobError& error) {
  waiting_.leave(r.waiting);
  switch (r.kind) {
    case TrainRequest::Kind::sample:
      if (r.sample) fail_sample_request(*r.sample, error, counters_, waiting_);
      break;
    case TrainRequest::Kind::forward_backward: finish_err(r.fb_done, error, counters_); break;
    case TrainRequest::Kind::optim_step: finish_err(r.step_done, error, counters_); break;
    case TrainRequest::Kind::snapshot: finish_err(r.snapshot_done, error, counters_); break;
    case TrainRequest::Kind::load: finish_err(r.load_done, error, counters_); break;
    case TrainRequest::Kind::close: finish_err(r.close_done, error, counters_); break;
  }
}

bool TrainingSessions::run_single(Session& s, TrainRequest& r) {
  waiting_.leave(r.waiting);
  try {
    switch (r.kind) {
      case TrainRequest::Kind::optim_step:
        if (s.group) trainer_->reduce_gradients(s.slot, *s.group);
        finish_ok(r.step_done, trainer_->optim_step(s.slot, r.adam), counters_);
        break;
      case TrainRequest::Kind::snapshot: {
        SessionSnapshot snap;
        snap.weights = trainer_->share_weights(s.slot);  // no copy where the trainer can share
        if (r.with_optimizer) {
          snap.optimizer = std::make_shared<const engine::AdamW>(trainer_->optimizer(s.slot));
        }
        snap.step = trainer_->step_count(s.slot);
        finish_ok(r.snapshot_done, std::move(snap), counters_);
        break;
      }
      case TrainRequest::Kind::load: {
        // attach() replaces the slot's weights, gradients and optimizer; it validates (and
        // loads the pool) before changing anything, so a refused load leaves the session as is.
        r.weights.validate(config_, "load_state adapter");
        const int64_t step = r.optimizer.step_count();
        trainer_->attach(s.slot, std::move(r.weights), std::move(r.optimizer));
        finish_ok(r.load_done, step, counters_);
        break;
      }
      case TrainRequest::Kind::close:
        trainer_->detach(s.slot);
        pool_->clear(s.slot);
        slot_used_[size_t(s.slot)] = false;
        finish_ok(r.close_done, true, counters_);
        return false;
      case TrainRequest::Kind::forward_backward:
      case TrainRequest::Kind::sample:
        SPINDLE_ASSERT(false);
    }
  } catch (...) {
    fail(r, current_job_error());
  }
  return true;
}

uint64_t TrainingSessions::oldest_group_job() const {
  uint64_t oldest = UINT64_MAX;
  for (const auto& [id, s] : sessions_) {
    if (s.group && !s.jobs.empty()) oldest = std::min(oldest, s.jobs.front()->order);
  }
  return oldest;
}

bool TrainingSessions::pass() {
  bool progress = false;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    Session& s = it->second;
    bool open = true;
    while (open && !s.jobs.empty() &&
           s.jobs.front()->kind != TrainRequest::Kind::forward_backward) {
      const TrainRequest::Kind kind = s.jobs.front()->kind;
      const bool changes_slot = kind == TrainRequest::Kind::optim_step ||
                                kind == TrainRequest::Kind::load ||
                                kind == TrainRequest::Kind::close;
      if (changes_slot && s.in_flight > 0) break;  // resumes after sample_done
      if (kind == TrainRequest::Kind::optim_step && s.group &&
          s.jobs.front()->order != oldest_group_job()) {
        break;  // an older job of a group session runs first (its own pass, or a merged one)
      }
      TrainRequestPtr r = std::move(s.jobs.front());
      s.jobs.pop_front();
      progress = true;
      if (kind == TrainRequest::Kind::sample) {
        r->sample->session = it->first;
        r->sample->train_slot = s.slot;
        ++s.in_flight;
        dispatch_(std::move(r->sample));
        continue;
      }
      open = run_single(s, *r);
    }
    it = open ? std::next(it) : sessions_.erase(it);
  }
  // The merge group of the oldest forward/forward_backward head.
  const TrainRequest* oldest = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.jobs.empty() || s.jobs.front()->kind != TrainRequest::Kind::forward_backward) continue;
    const TrainRequest* head = s.jobs.front().get();
    if (!oldest || head->order < oldest->order) oldest = head;
  }
  if (!oldest) return progress;
  std::vector<SessionId> group;
  for (auto& [id, s] : sessions_) {
    if (!s.jobs.empty() && s.jobs.front()->kind == TrainRequest::Kind::forward_backward &&
        same_group(*s.jobs.front(), *oldest)) {
      group.push_back(id);
    }
  }
  run_group(group);
  return true;
}

void TrainingSessions::run_group(const std::vector<SessionId>& ids) {
  std::vector<TrainRequestPtr> owned;
  std::vector<TrainRequest*> jobs;
  std::vector<int32_t> slots;
  for (SessionId id : ids) {
    Session& s = sessions_.at(id);
    TrainRequestPtr r = std::move(s.jobs.front());
    s.jobs.pop_front();
    waiting_.leave(r->waiting);
    try {
      validate_job(*r, config_);
    } catch (...) {
      fail(*r, current_job_error());
      continue;
    }
    jobs.push_back(r.get());
    slots.push_back(s.slot);
    owned.push_back(std::move(r));
  }
  if (jobs.empty()) return;
  run_merged(jobs, slots);
}

void TrainingSessions::run_merged(const std::vector<TrainRequest*>& jobs,
                                  const std::vector<int32_t>& slots) {
  std::vector<engine::TrainDatum> data;
  std::vector<size_t> first(jobs.size() + 1, 0);
  for (size_t j = 0; j < jobs.size(); ++j) {
    first[j] = data.size();
    for (engine::TrainDatum& d : jobs[j]->data) {
      d.slot = slots[j];
      data.push_back(std::move(d));
    }
  }
  first[jobs.size()] = data.size();
  const TrainRequest& key = *jobs.front();
  // One trainer call per run of data within tokens_per_pass_; outputs concatenated.
  auto call = [&](std::span<const engine::TrainDatum> batch) {
    ++counters_.train_passes;
    engine::ForwardBackwardOutput all;
    size_t begin = 0;
    while (begin < batch.size()) {
      size_t end = begin;
      int64_t tokens = 0;
      while (end < batch.size() &&
             (end == begin || tokens + int64_t(batch[end].input_tokens.size()) <= tokens_per_pass_)) {
        tokens += int64_t(batch[end].input_tokens.size());
        ++end;
      }
      ++counters_.train_calls;
      const auto chunk = batch.subspan(begin, end - begin);
      engine::ForwardBackwardOutput out = key.backward
                                              ? trainer_->forward_backward(chunk, key.fn, key.config)
                                              : trainer_->forward(chunk, key.fn, key.config);
      for (auto& lp : out.logprobs) all.logprobs.push_back(std::move(lp));
      all.metrics.add(out.metrics);
      begin = end;
    }
    return all;
  };
  auto deliver = [&](size_t j, engine::ForwardBackwardOutput& out, size_t offset) {
    const size_t n = first[j + 1] - first[j];
    TrainBatchResult result;
    result.logprobs.assign(std::make_move_iterator(out.logprobs.begin() + long(offset)),
                           std::make_move_iterator(out.logprobs.begin() + long(offset + n)));
    result.metrics = job_metrics({data.data() + first[j], n}, result.logprobs, jobs[j]->fn,
                                 jobs[j]->config);
    finish_ok(jobs[j]->fb_done, std::move(result), counters_);
  };
  std::optional<engine::ForwardBackwardOutput> out;
  try {
    out = call(data);
  } catch (...) {
    if (jobs.size() == 1) {
      fail(*jobs.front(), current_job_error());
      return;
    }
  }
  if (out) {
    if (jobs.size() > 1) counters_.train_jobs_merged += jobs.size();
    for (size_t j = 0; j < jobs.size(); ++j) deliver(j, *out, first[j]);
    return;
  }
  // The merged call failed before any job got its result: run each job alone, so that the
  // failure stays with the job that causes it.
  for (size_t j = 0; j < jobs.size(); ++j) {
    try {
      engine::ForwardBackwardOutput out =
          call(std::span<const engine::TrainDatum>(data).subspan(first[j], first[j + 1] - first[j]));
      deliver(j, out, 0);
    } catch (...) {
      fail(*jobs[j], current_job_error());
    }
  }
}

void TrainingSessions::fail_all(const JobError& error) {
  for (auto& [id, s] : sessions_) {
    for (auto& r : s.jobs) fail(*r, error);
    s.jobs.clear();
  }
}

}  // namespace spindle::scheduler::detail
