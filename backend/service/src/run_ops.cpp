// run_start/list/status/stop/resume, served on the catalog thread with the caller's tenant.
// The runs themselves execute in RunManager (run_manager.h).

#include <nlohmann/json.hpp>

#include "catalog_ops.h"
#include "run_manager.h"
#include "spindle/core/error.h"

namespace spindle::service {

using namespace protocol;

namespace {

catalog::RunUpdate status_update(std::string status, std::string error) {
  catalog::RunUpdate u;
  u.status = std::move(status);
  u.error = std::move(error);
  return u;
}

[[noreturn]] void precondition(const std::string& message) {
  throw Error(ErrorCode::failed_precondition, message);
}

// Starts the recorded run; on failure the record becomes "failed" and the error is rethrown.
void start_recorded(Daemon& d, catalog::Catalog& cat, const catalog::RunRecord& record,
                    rl::RunConfig config, bool resume) {
  const catalog::RunRecord running =
      cat.update_run(record.tenant, record.id, status_update("running", ""));
  try {
    d.runs->start(running, std::move(config), resume);
  } catch (const std::exception& e) {
    cat.update_run(record.tenant, record.id, status_update("failed", e.what()));
    throw;
  }
}

RunStartReply run_start(Daemon& d, catalog::Catalog& cat, const Call& call,
                        const RunStartRequest& r) {
  rl::RunConfig config = rl::parse_run_config(r.config_json, "run_start config_json");
  config.tenant = call.tenant;  // a run trains the caller's policies only
  catalog::RunRecord record;
  record.steps = config.steps;
  for (const rl::PolicyConfig& p : config.policies) {
    const std::string address = "spindle://" + call.tenant + "/" + p.name;
    try {
      const catalog::Policy existing = cat.get_policy(call.tenant, p.name);
      if (&served_base_of(d, existing) != &d.default_base()) {
        SPINDLE_THROW(failed_precondition,
                      "policy {} is on base '{}'; GRPO runs train on the default base '{}'",
                      address, existing.base_id, d.default_base().id);
      }
      if (existing.head && !r.resume) {
        SPINDLE_THROW(already_exists,
                      "policy {} already has revisions: choose another name, or set resume to "
                      "continue it from its head",
                      address);
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::not_found) throw;
    }
    record.policies.push_back(address);
  }
  record.config_json = config.to_json();
  record = cat.create_run(call.tenant, record, "tenant:" + call.tenant);
  start_recorded(d, cat, record, std::move(config), r.resume);
  d.log->info("run {} started by tenant {}", record.id, call.tenant);
  return {record.id, record.policies};
}

RunStatusReply run_status(catalog::Catalog& cat, const Call& call, const RunStatusRequest& r) {
  RunStatusReply out;
  out.run = run_info(cat.get_run(call.tenant, r.run_id));
  for (const catalog::RunMetric& m : cat.run_metrics(call.tenant, r.run_id, r.metrics_since_step)) {
    out.metrics.push_back({m.step, m.policy, m.metrics_json});
  }
  return out;
}

RunStatusReply run_stop(Daemon& d, catalog::Catalog& cat, const Call& call, const RunIdRequest& r) {
  catalog::RunRecord record = cat.get_run(call.tenant, r.run_id);
  if (d.runs->stop(record.id)) {
    d.log->info("run {}: stop requested by tenant {}", record.id, call.tenant);
  } else if (record.status == "queued" || record.status == "running") {
    record = cat.update_run(call.tenant, record.id, status_update("stopped", record.error));
  } else if (record.status != "stopped") {
    precondition("run " + record.id + " is " + record.status + ": nothing to stop");
  }
  return {run_info(record), {}};
}

RunStatusReply run_resume(Daemon& d, catalog::Catalog& cat, const Call& call,
                          const RunIdRequest& r) {
  const catalog::RunRecord record = cat.get_run(call.tenant, r.run_id);
  if (d.runs->active(record.id)) precondition("run " + record.id + " is still running");
  if (record.status == "done") precondition("run " + record.id + " is done");
  rl::RunConfig config = rl::parse_run_config(record.config_json, "run " + record.id);
  config.tenant = call.tenant;
  start_recorded(d, cat, record, std::move(config), /*resume=*/true);
  d.log->info("run {} resumed by tenant {} at step {}", record.id, call.tenant, record.step);
  return {run_info(cat.get_run(call.tenant, record.id)), {}};
}

void run_op(Daemon& d, catalog::Catalog& cat, const Call& call, const Request& req) {
  switch (req.op) {
    case Op::run_start:
      return d.replies->ok(call, run_start(d, cat, call, std::get<RunStartRequest>(req.body)));
    case Op::run_list: {
      const auto& r = std::get<RunListRequest>(req.body);
      const catalog::RunPage page = cat.list_runs(call.tenant, {int(r.limit), r.cursor});
      RunListReply out;
      for (const auto& run : page.items) out.runs.push_back(run_info(run));
      out.next_cursor = page.next_cursor;
      return d.replies->ok(call, std::move(out));
    }
    case Op::run_status:
      return d.replies->ok(call, run_status(cat, call, std::get<RunStatusRequest>(req.body)));
    case Op::run_stop:
      return d.replies->ok(call, run_stop(d, cat, call, std::get<RunIdRequest>(req.body)));
    case Op::run_resume:
      return d.replies->ok(call, run_resume(d, cat, call, std::get<RunIdRequest>(req.body)));
    default:
      SPINDLE_THROW(internal, "not a run op: {}", op_name(req.op));
  }
}

}  // namespace

void dispatch_run_op(Daemon& d, Call call, protocol::Request request) {
  post_catalog_op(d, std::move(call), std::move(request), run_op);
}

}  // namespace spindle::service
