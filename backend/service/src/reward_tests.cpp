#include "reward_tests.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <future>
#include <memory>
#include <optional>

#include "daemon_state.h"
#include "engine_ops.h"
#include "worker_ops.h"
#include "spindle/core/error.h"
#include "spindle/engine/generator.h"
#include "spindle/rewards/rewards.h"
#include "spindle/rewards/summary.h"

namespace spindle::service {

using namespace protocol;

namespace {

using Completions = std::vector<engine::Completion>;
using SampleOutcome = scheduler::Outcome<Completions>;

// The served base (empty adapter) or a policy revision of the caller's tenant. A policy address
// is resolved on the catalog thread; this worker waits for it.
ResolvedAdapter resolve(Daemon& d, const Call& call, const std::string& text) {
  if (!text.starts_with("spindle://")) {
    ServedBase* base = d.find_base(text);
    SPINDLE_CHECK(base != nullptr && !text.empty(), not_found,
                  "'{}' is neither a served base ({}) nor a spindle://tenant/policy address",
                  text, d.served_ids());
    return {base, "", ""};
  }
  const catalog::Address a = catalog::parse_address(text);
  if (a.tenant != call.tenant) {
    d.log->warn("refused request {} (reward_test): tenant '{}' named another tenant's address {}",
                call.request_id, call.tenant, text);
    SPINDLE_THROW(not_found, "policy {} not found", a.policy_str());
  }
  auto promise = std::make_shared<std::promise<ResolvedAdapter>>();
  std::future<ResolvedAdapter> resolved = promise->get_future();
  d.catalog.post([&d, tenant = call.tenant, a, promise](catalog::Catalog& cat) {
    try {
      const catalog::Resolved r = cat.get(tenant, a);
      ServedBase& base = served_base_of(d, r.policy);
      d.owners.note(r.revision.blob, tenant);
      promise->set_value({&base, r.revision.id, r.revision.blob});
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return resolved.get();
}

std::vector<int32_t> encode_prompt(const engine::Tokenizer& tokenizer, const std::string& text,
                                   size_t row) {
  std::vector<int32_t> ids = tokenizer.encode(text);
  if (ids.empty() && tokenizer.bos_id()) ids.push_back(*tokenizer.bos_id());
  SPINDLE_CHECK(!ids.empty(), invalid_argument, "rows[{}].prompt encodes to no tokens", row);
  return ids;
}

engine::SamplingParams sampling_params(const SamplingParamsMsg& p) {
  engine::SamplingParams sp;
  sp.max_tokens = p.max_tokens;
  sp.temperature = p.temperature;
  sp.top_k = p.top_k;
  sp.top_p = p.top_p;
  sp.seed = p.seed;
  sp.stop_token_ids = p.stop_token_ids;
  sp.stop_strings = p.stop_strings;
  sp.max_tokens = std::max(p.max_tokens, 1);  // 0 (until a stop) is resolved per row
  sp.validate();
  sp.max_tokens = p.max_tokens;
  return sp;
}

// A coordinator with a live worker for the base: every row is one `sample` forwarded to the
// worker placement picks for `key` (as a client's sample of the same policy would be), all at
// once; the completions come back here to be scored. A row whose worker fails or is lost
// fails the request with that error (unavailable: retry, the protocol's rule).
std::vector<Completions> sample_rows_on_workers(Daemon& d, const Call& call,
                                                const RewardTestRequest& r,
                                                const ResolvedAdapter& adapter,
                                                std::vector<scheduler::SampleJob>& jobs,
                                                const std::string& key) {
  std::vector<std::future<ForwardOutcome>> pending;
  for (scheduler::SampleJob& job : jobs) {
    Request req;
    req.op = Op::sample;
    req.request_id = call.request_id;
    SampleRequest s;
    s.address = r.address;
    s.prompt = add_tensor(req.frames, std::span<const int32_t>(job.prompt));
    s.num_samples = job.num_samples;
    s.sampling_params = r.sampling_params;
    s.sampling_params.max_tokens = job.params.max_tokens;
    req.body = std::move(s);
    auto promise = std::make_shared<std::promise<ForwardOutcome>>();
    pending.push_back(promise->get_future());
    Call row;  // no envelope: the outcome comes back here, not to a client
    row.tenant = call.tenant;
    row.op = Op::sample;
    row.request_id = call.request_id;
    Forward f = sampling_forward(row, adapter, key, std::move(req));
    f.done = [promise](ForwardOutcome& o) {
      if (o.final) promise->set_value(std::move(o));
      return false;
    };
    d.cluster->post(std::move(f), *d.replies);
  }
  std::vector<Completions> out;
  for (size_t i = 0; i < pending.size(); ++i) {
    ForwardOutcome o = pending[i].get();  // every one, so none outlives this call's promises
    if (!o.ok) {
      for (size_t j = i + 1; j < pending.size(); ++j) pending[j].wait();
      throw ProtocolError(o.code, fmt::format("rows[{}]: {}", i, o.message));
    }
    out.push_back(completions_of(decode_reply(o.parts, d.config.limits)));
  }
  return out;
}

// Every row's completions, rows submitted at once so they batch. nullopt when the scheduler
// refused a job (its queue is full); jobs already submitted are waited for either way, since
// their callbacks outlive nothing here but their promises.
std::optional<std::vector<Completions>> sample_rows(Daemon& d, const Call& call,
                                                    const RewardTestRequest& r,
                                                    const ResolvedAdapter& adapter) {
  const engine::SamplingParams params = sampling_params(r.sampling_params);
  std::vector<scheduler::SampleJob> jobs(r.rows.size());
  int64_t tokens = 0;  // the tenant's quota (tenant_quotas.h) is taken for every row at once
  for (size_t i = 0; i < r.rows.size(); ++i) {
    scheduler::SampleJob& job = jobs[i];
    job.tenant = call.tenant;
    job.adapter_key = adapter.blob;
    job.prompt = encode_prompt(*adapter.base->tokenizer, r.rows[i].prompt, i);
    job.num_samples = r.num_samples;
    job.params = params;
    job.params.max_tokens = max_tokens_for(d, *adapter.base, params.max_tokens, job.prompt.size(),
                                           fmt::format("rows[{}].prompt", i));
    tokens += int64_t(job.prompt.size()) + int64_t(job.num_samples) * job.params.max_tokens;
  }
  const TenantQuotas::ChargePtr charge = d.quotas.charge(call.tenant, tokens, adapter.blob);
  if (d.cluster->coordinator() && d.cluster->serves(adapter.base->id)) {
    std::string key = "base:" + call.tenant;  // the placement key sampling uses (sampling_ops)
    if (r.address.starts_with("spindle://")) {
      key = call.tenant + "/" + catalog::parse_address(r.address).policy;
    }
    return sample_rows_on_workers(d, call, r, adapter, jobs, key);
  }
  std::vector<std::future<SampleOutcome>> pending;
  bool refused = false;
  for (size_t i = 0; i < jobs.size() && !refused; ++i) {
    auto promise = std::make_shared<std::promise<SampleOutcome>>();
    jobs[i].done = [promise](SampleOutcome o) { promise->set_value(std::move(o)); };
    std::future<SampleOutcome> f = promise->get_future();
    if (adapter.base->scheduler->submit_sample(std::move(jobs[i]))) {
      pending.push_back(std::move(f));
    } else {
      refused = true;
    }
  }
  std::vector<SampleOutcome> outcomes;
  for (auto& f : pending) outcomes.push_back(f.get());
  charge->release();
  if (refused) return std::nullopt;
  std::vector<Completions> out;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (!outcomes[i].ok()) {
      throw Error(outcomes[i].error.code, fmt::format("rows[{}]: {}", i, outcomes[i].error.message));
    }
    out.push_back(std::move(*outcomes[i].value));
  }
  return out;
}

std::string metadata_of(const RewardTestRow& row, size_t i) {
  if (row.metadata_json.empty()) return "{}";
  const nlohmann::json j = nlohmann::json::parse(row.metadata_json, nullptr, false);
  SPINDLE_CHECK(j.is_object(), invalid_argument, "rows[{}].metadata_json: not a JSON object", i);
  return row.metadata_json;
}

DistributionInfo distribution_info(const rewards::Distribution& d) {
  return {d.n, d.mean, d.std, d.min, d.max, std::vector<uint64_t>(d.histogram.begin(), d.histogram.end())};
}

// Steps 1-4 of reward_tests.h for one request; replies itself.
void run_reward_test(Daemon& d, rewards::RewardScorer& scorer, const Call& call,
                     const RewardTestRequest& r) {
  const rewards::RewardSpec spec = rewards::RewardSpec::parse(r.spec_json, "spec_json");
  scorer.validate(spec);
  std::vector<std::string> metadata;
  for (size_t i = 0; i < r.rows.size(); ++i) metadata.push_back(metadata_of(r.rows[i], i));
  const ResolvedAdapter adapter = resolve(d, call, r.address);
  if (!adapter.base->tokenizer) {
    SPINDLE_THROW(failed_precondition, "reward_test needs a tokenizer; the base '{}' has none",
                  adapter.base->id);
  }
  std::optional<std::vector<Completions>> sampled = sample_rows(d, call, r, adapter);
  if (!sampled) return reply_scheduler_full(d, call, *adapter.base);

  std::vector<rewards::RewardItem> items;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    for (const engine::Completion& c : (*sampled)[i]) {
      items.push_back({r.rows[i].prompt, c.text, c.tokens, r.rows[i].reference, metadata[i]});
    }
  }
  const rewards::RewardBatch batch = scorer.score(spec, items);
  const rewards::RewardReport report = rewards::summarize(spec, batch, r.bins);

  RewardTestReply out;
  out.revision_id = adapter.revision_id;
  for (size_t t = 0; t < spec.terms.size(); ++t) {
    out.terms.push_back({spec.terms[t].name, spec.terms[t].plugin, spec.terms[t].weight,
                         distribution_info(report.terms[t])});
  }
  out.total = distribution_info(report.total);
  Frames frames;
  size_t k = 0;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    for (const engine::Completion& c : (*sampled)[i]) {
      RewardSampleInfo s;
      s.row = uint32_t(i);
      s.tokens = add_tensor(frames, std::span<const int32_t>(c.tokens));
      s.text = c.text;
      s.stop_reason = engine::stop_reason_name(c.stop_reason);
      for (size_t t = 0; t < spec.terms.size(); ++t) {
        s.scores.push_back(batch.per_term[t][k]);
        s.infos.push_back(batch.info[t][k]);
      }
      s.total = batch.total[k];
      out.samples.push_back(std::move(s));
      ++k;
    }
  }
  d.log->info("reward_test (tenant {}): {} rows x {} samples from {}, mean total {:.4f}",
              call.tenant, r.rows.size(), r.num_samples, r.address, report.total.mean);
  d.replies->ok(call, std::move(out), std::move(frames));
}

}  // namespace

RewardTester::RewardTester(Daemon& d, int workers) : d_(d) {
  const int64_t mib = d.config.reward_host_memory_mib;
  SPINDLE_CHECK(mib == 0 || mib >= rewards::kMinRewardHostMemoryMib, invalid_argument,
                "--reward-host-memory-mib {}: 0 (no limit) or at least {}", mib,
                rewards::kMinRewardHostMemoryMib);
  for (int i = 0; i < std::max(workers, 1); ++i) threads_.emplace_back([this] { loop(); });
}

void RewardTester::post(Call call, protocol::Request request) {
  if (call.op == Op::plugin_rescan) plugin_generation_.fetch_add(1);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(call), std::move(request)});
  }
  cv_.notify_one();
}

void RewardTester::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void RewardTester::loop() {
  std::optional<rewards::RewardScorer> scorer;  // this thread's; its host starts on first use
  const int64_t memory_mib = d_.config.reward_host_memory_mib;
  uint64_t generation = 0;                      // plugin_generation_ the scorer has scanned
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      const uint64_t g = plugin_generation_.load();
      if (scorer && g != generation) scorer->rescan();
      generation = g;
      if (!scorer) {
        rewards::RewardHostOptions host;
        host.memory_limit_mib = memory_mib;
        scorer.emplace(host);
      }
      if (task.call.op == Op::reward_test) {
        run_reward_test(d_, *scorer, task.call, std::get<RewardTestRequest>(task.request.body));
      } else if (task.call.op == Op::datasets) {
        reply_datasets(d_, task.call, std::get<DatasetsRequest>(task.request.body));
      } else {
        reply_reward_plugins(d_, *scorer, task.call);  // reward_plugins, plugin_rescan
      }
    } catch (const std::exception& e) {
      reply_exception(d_, task.call, e);
    }
  }
  close_thread_push();
}

void dispatch_reward_test(Daemon& d, Call call, protocol::Request request) {
  d.reward_tests->post(std::move(call), std::move(request));
}

}  // namespace spindle::service
