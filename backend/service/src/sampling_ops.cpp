// sample, sample_stream and compute_logprobs: resolve the address (a bare base id, or a policy revision whose
// blob id is the residency key) and submit to the scheduler. Immutable @<full id> resolutions
// are cached, so a hot revision skips the catalog thread.

#include <algorithm>
#include <mutex>

#include "catalog_ops.h"
#include "engine_ops.h"
#include "spindle/core/error.h"

namespace spindle::service {

using namespace protocol;

namespace {

bool is_full_id(const std::string& rev) {
  return rev.size() == 64 &&
         rev.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string cache_key(const std::string& tenant, const catalog::Address& a) {
  return ResolutionCache::key(tenant, a.policy, a.revision);
}

// A failed job's message; damaged stored bytes (data_loss) name the revision, since the
// engine knows adapters only by blob.
template <class E>
std::string job_message(const E& error, const std::string& revision_id) {
  if (error.code != ErrorCode::data_loss || revision_id.empty()) return error.message;
  return "revision " + revision_id + ": " + error.message;
}

// The completions as wire sequences, their tensors appended to `frames`.
std::vector<SequenceMsg> sequences(const std::vector<engine::Completion>& completions,
                                   Frames& frames) {
  std::vector<SequenceMsg> out;
  for (const auto& c : completions) {
    SequenceMsg m;
    m.tokens = add_tensor(frames, std::span<const int32_t>(c.tokens));
    m.logprobs = add_tensor(frames, std::span<const float>(c.logprobs));
    m.stop_reason = engine::stop_reason_name(c.stop_reason);
    m.text = c.text;
    out.push_back(std::move(m));
  }
  return out;
}

// A plain sample's reply (no prompt logprobs) from the job's completions; `rev` served it
// ("" = the base or a session's live weights).
std::function<void(scheduler::Outcome<std::vector<engine::Completion>>)> sample_reply(
    Daemon& d, const Call& call, std::string rev) {
  return [&d, call, rev = std::move(rev)](scheduler::Outcome<std::vector<engine::Completion>> r) {
    if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), job_message(r.error, rev));
    SampleReply out;
    out.revision_id = rev;
    Frames frames;
    out.sequences = sequences(*r.value, frames);
    out.prompt_logprobs = add_tensor(frames, std::span<const float>());
    out.topk_prompt_ids = add_tensor(frames, std::span<const int32_t>(), {0, 0});
    out.topk_prompt_logprobs = add_tensor(frames, std::span<const float>(), {0, 0});
    d.replies->ok(call, std::move(out), std::move(frames));
  };
}

scheduler::SampleJob sample_job(const Daemon& d, const Call& call, const Request& req,
                                const ResolvedAdapter& adapter) {
  const auto& s = std::get<SampleRequest>(req.body);
  scheduler::SampleJob job;
  job.tenant = call.tenant;
  job.adapter_key = adapter.blob;
  job.prompt = read_int32(s.prompt, req.frames, "prompt");
  job.num_samples = s.num_samples;
  const auto& p = s.sampling_params;
  job.params.max_tokens = max_tokens_for(d, *adapter.base, p.max_tokens, job.prompt.size(), "prompt");
  job.params.temperature = p.temperature;
  job.params.top_k = p.top_k;
  job.params.top_p = p.top_p;
  job.params.seed = p.seed;
  job.params.stop_token_ids = p.stop_token_ids;
  job.params.stop_strings = p.stop_strings;
  job.params.validate();
  return job;
}

// Each token's text as decode renders it after the token before it (SampleDeltaMsg::pieces); a
// stop token's piece is "", as its text never joins the completion's; all "" without a
// tokenizer. One table lookup per token: cheap enough for the engine thread.
std::vector<std::string> delta_pieces(const engine::Tokenizer* tokenizer,
                                      const scheduler::SampleDelta& delta,
                                      const std::vector<int32_t>& stop_token_ids) {
  std::vector<std::string> out(delta.tokens.size());
  if (!tokenizer) return out;
  int32_t prev = delta.prev;
  for (size_t i = 0; i < delta.tokens.size(); ++i) {
    const int32_t t = delta.tokens[i];
    if (std::find(stop_token_ids.begin(), stop_token_ids.end(), t) == stop_token_ids.end()) {
      out[i] = tokenizer->decode({&t, 1}, prev);
    }
    prev = t;
  }
  return out;
}

// The most tokens a sample job holds: its prompt and every sample at max_tokens.
int64_t job_tokens(const scheduler::SampleJob& job) {
  return int64_t(job.prompt.size()) + int64_t(job.num_samples) * job.params.max_tokens;
}

// Takes the job's share of the tenant's quotas (tenant_quotas.h; throws resource when over)
// and makes `done` give it back before it replies, so the tenant may send its next request on
// the reply. A job the scheduler refuses gives it back when it is dropped.
template <class Outcome>
void hold_quota(Daemon& d, const Call& call, int64_t tokens, const std::string& adapter,
                std::function<void(Outcome)>& done) {
  TenantQuotas::ChargePtr charge = d.quotas.charge(call.tenant, tokens, adapter);
  done = [charge = std::move(charge), inner = std::move(done)](Outcome r) {
    charge->release();
    inner(std::move(r));
  };
}

// sample_stream: one non-final message per engine step that produced tokens (engine thread:
// building it costs what any reply costs), then the final one with exactly sample's sequences.
void stream_replies(Daemon& d, const Call& call, const ResolvedAdapter& adapter,
                    scheduler::SampleJob& job) {
  const std::string rev = adapter.revision_id;
  job.progress = [&d, call, rev, tokenizer = adapter.base->tokenizer.get(),
                  stops = job.params.stop_token_ids](
                     std::span<const scheduler::SampleDelta> deltas) {
    SampleStreamReply out;
    out.revision_id = rev;
    Frames frames;
    for (const scheduler::SampleDelta& delta : deltas) {
      out.deltas.push_back({uint32_t(delta.sequence), add_tensor(frames, delta.tokens),
                            add_tensor(frames, delta.logprobs),
                            delta_pieces(tokenizer, delta, stops)});
    }
    d.replies->ok(call, std::move(out), std::move(frames));
  };
  job.done = [&d, call, rev](scheduler::Outcome<std::vector<engine::Completion>> r) {
    if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), job_message(r.error, rev));
    SampleStreamReply out;
    out.final = true;
    out.revision_id = rev;
    Frames frames;
    out.sequences = sequences(*r.value, frames);
    d.replies->ok(call, std::move(out), std::move(frames));
  };
}

// A sample with prompt logprobs: the completions and a scoring pass over the prompt run as two
// scheduler jobs on the same adapter; the reply goes when both are done (both callbacks run on
// the base's engine thread; the mutex keeps that an implementation detail).
struct JoinedSample {
  std::mutex mutex;
  int pending = 2;
  TenantQuotas::ChargePtr charge;  // given back when both are done
  std::optional<std::pair<std::string, std::string>> error;  // (code, message), the first
  std::vector<engine::Completion> completions;
  std::vector<float> prompt_logprobs;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

void finish_joined(Daemon& d, const Call& call, const std::string& rev, int32_t k,
                   JoinedSample& j) {
  if (j.error) return d.replies->error(call, j.error->first, j.error->second);
  SampleReply out;
  out.revision_id = rev;
  Frames frames;
  out.sequences = sequences(j.completions, frames);
  const int64_t n = int64_t(j.prompt_logprobs.size());
  out.prompt_logprobs = add_tensor(frames, std::span<const float>(j.prompt_logprobs));
  out.topk_prompt_ids = add_tensor(frames, std::span<const int32_t>(j.top_ids), {k > 0 ? n : 0, k});
  out.topk_prompt_logprobs =
      add_tensor(frames, std::span<const float>(j.top_logprobs), {k > 0 ? n : 0, k});
  d.replies->ok(call, std::move(out), std::move(frames));
}

bool submit_sample_with_prompt(Daemon& d, const Call& call, const Request& req,
                               const ResolvedAdapter& adapter, scheduler::SampleJob job) {
  const auto& s = std::get<SampleRequest>(req.body);
  const int32_t k = s.topk_prompt_logprobs;
  auto joined = std::make_shared<JoinedSample>();
  joined->charge = d.quotas.charge(call.tenant, job_tokens(job), adapter.blob);
  auto arrive = [&d, call, rev = adapter.revision_id, k, joined](auto fill) {
    std::lock_guard lock(joined->mutex);
    fill(*joined);
    if (--joined->pending == 0) {
      joined->charge->release();
      finish_joined(d, call, rev, k, *joined);
    }
  };
  scheduler::LogprobsJob scoring;
  scoring.tenant = call.tenant;
  scoring.adapter_key = adapter.blob;
  scoring.tokens = job.prompt;
  scoring.top_k = k;
  scoring.on_top_k = [joined](std::vector<int32_t> ids, std::vector<float> lps) {
    std::lock_guard lock(joined->mutex);
    joined->top_ids = std::move(ids);
    joined->top_logprobs = std::move(lps);
  };
  scoring.done = [arrive](scheduler::Outcome<std::vector<float>> r) {
    arrive([&](JoinedSample& j) {
      if (!r.ok()) {
        if (!j.error) j.error.emplace(wire_code(r.error.code), r.error.message);
      } else {
        j.prompt_logprobs = std::move(*r.value);
      }
    });
  };
  job.done = [arrive](scheduler::Outcome<std::vector<engine::Completion>> r) {
    arrive([&](JoinedSample& j) {
      if (!r.ok()) {
        if (!j.error) j.error.emplace(wire_code(r.error.code), r.error.message);
      } else {
        j.completions = std::move(*r.value);
      }
    });
  };
  scheduler::Scheduler& sched = *adapter.base->scheduler;
  if (!sched.submit_logprobs(std::move(scoring))) return false;
  if (!sched.submit_sample(std::move(job))) {
    // The scoring job is in: its reply waits for this one, which now fails as overloaded.
    arrive([&](JoinedSample& j) {
      if (!j.error) j.error.emplace(errc::overloaded, "scheduler queue full: retry later");
    });
  }
  return true;
}

void submit_local(Daemon& d, const Call& call, const Request& req, const ResolvedAdapter& adapter) {
  bool queued = false;
  d.owners.note(adapter.blob, call.tenant);
  scheduler::Scheduler& sched = *adapter.base->scheduler;
  if (call.op == Op::sample_stream) {
    scheduler::SampleJob job = sample_job(d, call, req, adapter);
    stream_replies(d, call, adapter, job);
    hold_quota(d, call, job_tokens(job), adapter.blob, job.done);
    queued = sched.submit_sample(std::move(job));
  } else if (call.op == Op::sample) {
    scheduler::SampleJob job = sample_job(d, call, req, adapter);
    const auto& s = std::get<SampleRequest>(req.body);
    if (s.include_prompt_logprobs || s.topk_prompt_logprobs > 0) {
      queued = submit_sample_with_prompt(d, call, req, adapter, std::move(job));
    } else {
      job.done = sample_reply(d, call, adapter.revision_id);
      hold_quota(d, call, job_tokens(job), adapter.blob, job.done);
      queued = sched.submit_sample(std::move(job));
    }
  } else {
    const auto& s = std::get<ComputeLogprobsRequest>(req.body);
    scheduler::LogprobsJob job;
    job.tenant = call.tenant;
    job.adapter_key = adapter.blob;
    job.tokens = read_int32(s.prompt, req.frames, "prompt");
    job.done = [&d, call, rev = adapter.revision_id](scheduler::Outcome<std::vector<float>> r) {
      if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), job_message(r.error, rev));
      ComputeLogprobsReply out;
      out.revision_id = rev;
      Frames frames;
      out.logprobs = add_tensor(frames, std::span<const float>(*r.value));
      d.replies->ok(call, std::move(out), std::move(frames));
    };
    hold_quota(d, call, int64_t(job.tokens.size()), adapter.blob, job.done);
    queued = sched.submit_logprobs(std::move(job));
  }
  if (!queued) reply_scheduler_full(d, call, *adapter.base);
}

// A coordinator with a live worker for the base forwards the request there (placed by
// `key`, tenant/policy); otherwise this process's scheduler runs it.
void submit(Daemon& d, const Call& call, Request& req, const ResolvedAdapter& adapter,
            const std::string& key) {
  if (!d.cluster->coordinator() || !d.cluster->serves(adapter.base->id)) {
    return submit_local(d, call, req, adapter);
  }
  // The tenant's quotas are the coordinator's (the whole cluster's work in flight): charged
  // here, given back with the final reply or the loss. Building the job validates the request
  // before it travels.
  int64_t tokens = 0;
  if (call.op == Op::compute_logprobs) {
    tokens = int64_t(read_int32(std::get<ComputeLogprobsRequest>(req.body).prompt, req.frames,
                                "prompt").size());
  } else {
    tokens = job_tokens(sample_job(d, call, req, adapter));
  }
  TenantQuotas::ChargePtr charge = d.quotas.charge(call.tenant, tokens, adapter.blob);
  Forward f = sampling_forward(call, adapter, key, std::move(req));
  f.done = [charge = std::move(charge)](ForwardOutcome& o) {
    if (o.final) charge->release();
    return true;
  };
  d.cluster->post(std::move(f), *d.replies);
}

const std::string& address_of(const Request& req) {
  return req.op == Op::compute_logprobs ? std::get<ComputeLogprobsRequest>(req.body).address
                                        : std::get<SampleRequest>(req.body).address;
}

}  // namespace

void submit_sampling(Daemon& d, const Call& call, const protocol::Request& request,
                     const ResolvedAdapter& adapter) {
  submit_local(d, call, request, adapter);
}

void submit_session_sampling(Daemon& d, const Call& call, const protocol::Request& request,
                             const std::string& session_id) {
  const std::optional<Session> s = d.sessions.find(call.tenant, session_id);
  SPINDLE_CHECK(s.has_value(), not_found, "training session '{}' not found on this worker",
                session_id);
  scheduler::SampleJob job = sample_job(d, call, request, {s->base, "", ""});
  job.session = s->sid;
  job.done = sample_reply(d, call, "");
  if (!s->base->scheduler->submit_sample(std::move(job))) reply_scheduler_full(d, call, *s->base);
}

std::vector<engine::Completion> completions_of(const protocol::Reply& reply) {
  std::vector<engine::Completion> out;
  for (const SequenceMsg& m : std::get<SampleReply>(reply.body).sequences) {
    engine::Completion c;
    c.tokens = read_int32(m.tokens, reply.frames, "tokens");
    c.logprobs = read_float32(m.logprobs, reply.frames, "logprobs");
    c.stop_reason = m.stop_reason == "stop" ? engine::StopReason::stop : engine::StopReason::length;
    c.text = m.text;
    out.push_back(std::move(c));
  }
  return out;
}

void dispatch_sampling_op(Daemon& d, Call call, protocol::Request request) {
  try {
    const std::string& text = address_of(request);
    if (!text.starts_with("spindle://")) {
      ServedBase* base = d.find_base(text);
      SPINDLE_CHECK(base != nullptr && !text.empty(), not_found,
                    "'{}' is neither a served base ({}) nor a spindle://tenant/policy address",
                    text, d.served_ids());
      return submit(d, call, request, {base, "", ""}, "base:" + call.tenant);
    }
    const catalog::Address a = catalog::parse_address(text);
    if (a.tenant != call.tenant) {
      d.log->warn("refused request {} ({}): tenant '{}' named another tenant's address {}",
                  call.request_id, op_name(call.op), call.tenant, text);
      SPINDLE_THROW(not_found, "policy {} not found", a.policy_str());
    }
    if (is_full_id(a.revision)) {
      if (auto hit = d.resolutions.find(cache_key(call.tenant, a))) {
        d.resolutions.note_hit();
        return submit(d, call, request, *hit, call.tenant + "/" + a.policy);
      }
    }
    d.resolutions.note_catalog_lookup();
    d.catalog.post([&d, call, a, request = std::move(request)](catalog::Catalog& cat) mutable {
      try {
        const catalog::Resolved r = cat.get(call.tenant, a);
        const ResolvedAdapter adapter{&served_base_of(d, r.policy), r.revision.id, r.revision.blob};
        if (is_full_id(a.revision)) d.resolutions.put(cache_key(call.tenant, a), adapter);
        submit(d, call, request, adapter, call.tenant + "/" + a.policy);
      } catch (const std::exception& e) {
        reply_exception(d, call, e);
      }
    });
  } catch (const std::exception& e) {
    reply_exception(d, call, e);
  }
}

}  // namespace spindle::service
