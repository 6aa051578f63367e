#include "run_manager.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "daemon_state.h"
#include "run_engines.h"
#include "worker_ops.h"
#include "spindle/core/error.h"

namespace spindle::service {

namespace fs = std::filesystem;
using namespace protocol;

protocol::RunInfo run_info(const catalog::RunRecord& r) {
  RunInfo i;
  i.id = r.id;
  i.tenant = r.tenant;
  i.status = r.status;
  i.error = r.error;
  i.step = r.step;
  i.steps = r.steps;
  i.policies = r.policies;
  i.config_json = r.config_json;
  i.created_ms = r.created_ms;
  i.updated_ms = r.updated_ms;
  return i;
}

namespace {

const char* record_status(rl::RunState state) {
  switch (state) {
    case rl::RunState::finished: return "done";
    case rl::RunState::failed: return "failed";
    default: return "stopped";
  }
}

// A daemon killed between two policies' saves of one step leaves their heads at different
// steps, which GrpoRun refuses to resume. Every policy ahead is rolled back (a catalog
// rollback: audited, nothing deleted) to its newest revision at or before the earliest head.
void align_heads(catalog::Catalog& cat, const catalog::RunRecord& record,
                 const rl::RunConfig& config, spdlog::logger& log) {
  std::vector<catalog::Resolved> heads;
  int64_t low = INT64_MAX;
  for (const rl::PolicyConfig& p : config.policies) {
    try {
      heads.push_back(cat.get(record.tenant, {record.tenant, p.name, ""}));
      low = std::min(low, heads.back().revision.step);
    } catch (const Error&) {
      return;  // a policy never saved (or missing): GrpoRun reports any mismatch itself
    }
  }
  for (const catalog::Resolved& h : heads) {
    catalog::Revision r = h.revision;
    while (r.step > low && r.parent) {
      r = cat.get(record.tenant, {record.tenant, h.policy.name, *r.parent}).revision;
    }
    if (r.id == h.revision.id || r.step > low) continue;
    cat.rollback(record.tenant, {record.tenant, h.policy.name, r.id}, "spindled");
    log.warn("run {}: {} rolled back from step {} to {} (its save of step {} was not matched by "
             "every policy of the run)", record.id, h.policy.name, h.revision.step, r.step,
             h.revision.step);
  }
}

// A daemon killed between a step's save and its metrics rows leaves the step's revision
// without its row; the resumed run continues after that step, so the row is recovered from
// the revision (which carries the step's metrics).
void backfill_saved_step(catalog::Catalog& cat, const catalog::RunRecord& record,
                         const rl::RunConfig& config) {
  for (const rl::PolicyConfig& p : config.policies) {
    try {
      const catalog::Resolved head = cat.get(record.tenant, {record.tenant, p.name, ""});
      if (head.revision.policy != head.policy.name || head.revision.step == 0) continue;
      bool recorded = false;
      for (const auto& m : cat.run_metrics(record.tenant, record.id, head.revision.step)) {
        recorded = recorded || (m.step == head.revision.step && m.policy == p.name);
      }
      if (recorded) continue;
      nlohmann::json j = nlohmann::json::parse(head.revision.metrics_json);
      j["revision"] = head.revision.id;
      cat.append_run_metrics(record.tenant, record.id,
                             {.step = head.revision.step, .policy = p.name, .metrics_json = j.dump()});
    } catch (const std::exception&) {
      // No head (never saved) or unreadable metrics: nothing to recover.
    }
  }
}

}  // namespace

void RunManager::reap_locked() {
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (it->second->finished.load()) {
      if (it->second->thread.joinable()) it->second->thread.join();
      it = runs_.erase(it);
    } else {
      ++it;
    }
  }
}

void RunManager::start(const catalog::RunRecord& record, rl::RunConfig config, bool resume) {
  std::lock_guard lock(mutex_);
  reap_locked();
  if (runs_.contains(record.id)) {
    SPINDLE_THROW(failed_precondition, "run {} is still active (a stop may be in progress)",
                  record.id);
  }
  // Runs train on the default base (the first --model).
  const ServedBase& base = d_.default_base();
  rl::RunContext ctx;
  ctx.scheduler = base.scheduler;
  ctx.model_config = base.weights.config;
  ctx.tokenizer = base.tokenizer.get();
  ctx.catalog_dir = d_.paths.data_dir;
  ctx.base_id = base.id;
  ctx.data_root = data_root_of(d_.config);
  ctx.reward_host.memory_limit_mib = d_.config.reward_host_memory_mib;
  SPINDLE_CHECK(ctx.tokenizer, invalid_argument,
                "GRPO runs need a tokenizer; the base '{}' has none", base.id);
  // A coordinator with a live worker for the base spreads the run's policies over its workers
  // (run_engines.h); they stay there for the run, failing over if one is lost.
  if (d_.cluster->coordinator() && d_.cluster->serves(base.id)) {
    ctx.engines = worker_policy_engines(d_, config.tenant, base);
  }
  auto a = std::make_unique<Active>();
  a->run = std::make_unique<rl::GrpoRun>(std::move(config), ctx, rl::RunOptions{.resume = resume});
  Active& ref = *a;
  runs_.emplace(record.id, std::move(a));
  ref.thread = std::thread([this, &ref, record] { drive(ref, record); });
}

bool RunManager::stop(const std::string& run_id) {
  std::lock_guard lock(mutex_);
  const auto it = runs_.find(run_id);
  if (it == runs_.end() || it->second->finished.load()) return false;
  it->second->run->stop();
  return true;
}

bool RunManager::active(const std::string& run_id) const {
  std::lock_guard lock(mutex_);
  const auto it = runs_.find(run_id);
  return it != runs_.end() && !it->second->finished.load();
}

void RunManager::stop_all() {
  std::map<std::string, std::unique_ptr<Active>> runs;
  {
    std::lock_guard lock(mutex_);
    runs.swap(runs_);
  }
  for (auto& [id, a] : runs) a->run->stop();
  for (auto& [id, a] : runs) {
    if (a->thread.joinable()) a->thread.join();
  }
}

void RunManager::publish(const catalog::RunRecord& record,
                         std::vector<protocol::RunMetricInfo> metrics) {
  Reply event;
  event.encoding = Encoding::json;
  event.op = Op::run_status;
  event.body = RunStatusReply{run_info(record), std::move(metrics)};
  try {
    d_.replies->publish("metrics", event);
  } catch (const std::exception& e) {
    d_.log->warn("run {}: metrics event not published: {}", record.id, e.what());
  }
}

// The run's thread: its own Catalog connection records every step, then the final status.
void RunManager::drive(Active& a, catalog::RunRecord record) {
  const std::string tenant = record.tenant;
  const std::string id = record.id;
  try {
    catalog::Catalog cat(d_.paths.data_dir);
    a.run->on_metrics([&](const rl::StepMetrics& m) {
      cat.append_run_metrics(tenant, id, {.step = m.step, .policy = m.policy,
                                          .metrics_json = m.to_json()});
      if (m.step > record.step) {
        catalog::RunUpdate u;
        u.step = m.step;
        record = cat.update_run(tenant, id, u);
      }
      publish(record, {{m.step, m.policy, m.to_json()}});
    });
    try {
      align_heads(cat, record, a.run->config(), *d_.log);
      if (record.step > 0) backfill_saved_step(cat, record, a.run->config());
    } catch (const std::exception& e) {
      d_.log->warn("run {}: cannot align the policies' heads before resuming: {}", id, e.what());
    }
    d_.log->info("run {} (tenant {}): started, {} polic{}", id, tenant,
                 a.run->config().policies.size(), a.run->config().policies.size() == 1 ? "y" : "ies");
    try {
      a.run->run();
    } catch (const std::exception& e) {
      d_.log->warn("run {} failed: {}", id, e.what());
    }
    const rl::RunStatus st = a.run->status();
    if (st.failovers > 0) {
      d_.log->warn("run {}: failed over {} time(s) after a lost worker, continuing from its last "
                   "save each time (last: {})",
                   id, st.failovers, st.last_failover);
    }
    catalog::RunUpdate u;
    u.status = record_status(st.state);
    u.error = st.error;
    record = cat.update_run(tenant, id, u);
    d_.log->info("run {}: {} at step {}/{}", id, record.status, record.step, record.steps);
    publish(record, {});
  } catch (const std::exception& e) {
    d_.log->error("run {}: cannot record the run: {}", id, e.what());
  }
  a.finished.store(true);
}

}  // namespace spindle::service
