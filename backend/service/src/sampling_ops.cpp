// sample, sample_stream and compute_logprobs: resolve the address (a bare base id, or a policy revision whose
// blob id is the residency key) and submit to the scheduler. Immutable @<full id> resolutions
// are cached, so a hot revision skips the catalog thread.

#include <algorithm>

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
  return tenant + "/" + a.policy + "@" + a.revision;
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

scheduler::SampleJob sample_job(const Call& call, const Request& req,
                                const ResolvedAdapter& adapter) {
  const auto& s = std::get<SampleRequest>(req.body);
  scheduler::SampleJob job;
  job.tenant = call.tenant;
  job.adapter_key = adapter.blob;
  job.prompt = read_int32(s.prompt, req.frames, "prompt");
  job.num_samples = s.num_samples;
  const auto& p = s.sampling_params;
  job.params.max_tokens = p.max_tokens;
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

// sample_stream: one non-final message per engine step that produced tokens (engine thread:
// building it costs what any reply costs), then the final one with exactly sample's sequences.
void stream_replies(Daemon& d, const Call& call, const std::string& rev,
                    scheduler::SampleJob& job) {
  job.progress = [&d, call, rev, stops = job.params.stop_token_ids](
                     std::span<const scheduler::SampleDelta> deltas) {
    SampleStreamReply out;
    out.revision_id = rev;
    Frames frames;
    for (const scheduler::SampleDelta& delta : deltas) {
      out.deltas.push_back({uint32_t(delta.sequence), add_tensor(frames, delta.tokens),
                            add_tensor(frames, delta.logprobs),
                            delta_pieces(d.tokenizer.get(), delta, stops)});
    }
    d.replies->ok(call, std::move(out), std::move(frames));
  };
  job.done = [&d, call, rev](scheduler::Outcome<std::vector<engine::Completion>> r) {
    if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
    SampleStreamReply out;
    out.final = true;
    out.revision_id = rev;
    Frames frames;
    out.sequences = sequences(*r.value, frames);
    d.replies->ok(call, std::move(out), std::move(frames));
  };
}

void submit(Daemon& d, const Call& call, const Request& req, const ResolvedAdapter& adapter) {
  bool queued = false;
  d.owners.note(adapter.blob, call.tenant);
  if (call.op == Op::sample_stream) {
    scheduler::SampleJob job = sample_job(call, req, adapter);
    stream_replies(d, call, adapter.revision_id, job);
    queued = d.scheduler->submit_sample(std::move(job));
  } else if (call.op == Op::sample) {
    scheduler::SampleJob job = sample_job(call, req, adapter);
    job.done = [&d, call, rev = adapter.revision_id](
                   scheduler::Outcome<std::vector<engine::Completion>> r) {
      if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
      SampleReply out;
      out.revision_id = rev;
      Frames frames;
      out.sequences = sequences(*r.value, frames);
      d.replies->ok(call, std::move(out), std::move(frames));
    };
    queued = d.scheduler->submit_sample(std::move(job));
  } else {
    const auto& s = std::get<ComputeLogprobsRequest>(req.body);
    scheduler::LogprobsJob job;
    job.tenant = call.tenant;
    job.adapter_key = adapter.blob;
    job.tokens = read_int32(s.prompt, req.frames, "prompt");
    job.done = [&d, call, rev = adapter.revision_id](scheduler::Outcome<std::vector<float>> r) {
      if (!r.ok()) return d.replies->error(call, wire_code(r.error.code), r.error.message);
      ComputeLogprobsReply out;
      out.revision_id = rev;
      Frames frames;
      out.logprobs = add_tensor(frames, std::span<const float>(*r.value));
      d.replies->ok(call, std::move(out), std::move(frames));
    };
    queued = d.scheduler->submit_logprobs(std::move(job));
  }
  if (!queued) reply_scheduler_full(d, call);
}

const std::string& address_of(const Request& req) {
  return req.op == Op::compute_logprobs ? std::get<ComputeLogprobsRequest>(req.body).address
                                        : std::get<SampleRequest>(req.body).address;
}

}  // namespace

void dispatch_sampling_op(Daemon& d, Call call, protocol::Request request) {
  try {
    const std::string& text = address_of(request);
    if (!text.starts_with("spindle://")) {
      SPINDLE_CHECK(text == d.base_id, not_found,
                    "'{}' is neither the served base ('{}') nor a spindle://tenant/policy "
                    "address", text, d.base_id);
      return submit(d, call, request, {});
    }
    const catalog::Address a = catalog::parse_address(text);
    if (a.tenant != call.tenant) {
      d.log->warn("refused request {} ({}): tenant '{}' named another tenant's address {}",
                  call.request_id, op_name(call.op), call.tenant, text);
      SPINDLE_THROW(not_found, "policy {} not found", a.policy_str());
    }
    if (is_full_id(a.revision)) {
      if (auto hit = d.resolutions.find(cache_key(call.tenant, a))) {
        return submit(d, call, request, *hit);
      }
    }
    d.catalog.post([&d, call, a, request = std::move(request)](catalog::Catalog& cat) {
      try {
        const catalog::Resolved r = cat.get(call.tenant, a);
        check_served_base(d, r.policy);
        const ResolvedAdapter adapter{r.revision.id, r.revision.blob};
        if (is_full_id(a.revision)) d.resolutions.put(cache_key(call.tenant, a), adapter);
        submit(d, call, request, adapter);
      } catch (const std::exception& e) {
        reply_exception(d, call, e);
      }
    });
  } catch (const std::exception& e) {
    reply_exception(d, call, e);
  }
}

}  // namespace spindle::service
