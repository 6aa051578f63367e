// Run records (schema v4): create, update, get, list, metrics timeline, interrupt on restart.

#include <nlohmann/json.hpp>

#include <random>

#include "catalog_impl.h"
#include "spindle/core/error.h"

namespace spindle::catalog {

using json = nlohmann::json;

namespace {

constexpr const char* kRunSelect =
    "SELECT r.seq, r.id, t.name, r.config_json, r.status, r.error, r.created_ms, r.updated_ms, "
    "r.step, r.steps, r.policies FROM runs r JOIN tenants t ON t.id = r.tenant_id ";

std::string new_run_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}", rng());
}

std::vector<std::string> policies_from_json(const std::string& text) {
  std::vector<std::string> out;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const auto& p : j) {
    if (p.is_string()) out.push_back(p.get<std::string>());
  }
  return out;
}

RunRecord run_from_row(const detail::Query& q) {
  RunRecord r;
  r.id = q.text(1);
  r.tenant = q.text(2);
  r.config_json = q.text(3);
  r.status = q.text(4);
  r.error = q.text(5);
  r.created_ms = q.int64(6);
  r.updated_ms = q.int64(7);
  r.step = q.int64(8);
  r.steps = q.int64(9);
  r.policies = policies_from_json(q.text(10));
  return r;
}

[[noreturn]] void throw_run_not_found(std::string_view run_id) {
  SPINDLE_THROW(not_found, "run {} not found", run_id);
}

// The run's seq inside `tenant`, or not_found (same message for another tenant's run).
int64_t require_run_seq(Catalog::Impl& impl, std::string_view tenant, std::string_view run_id) {
  const auto tid = impl.find_tenant(tenant);
  if (!tid) throw_run_not_found(run_id);
  auto q = impl.db.query("SELECT seq FROM runs WHERE id = ?1 AND tenant_id = ?2");
  q.bind(1, run_id).bind(2, *tid);
  if (!q.step()) throw_run_not_found(run_id);
  return q.int64(0);
}

RunRecord run_by_seq(Catalog::Impl& impl, int64_t seq) {
  auto q = impl.db.query(std::string(kRunSelect) + "WHERE r.seq = ?1");
  q.bind(1, seq);
  SPINDLE_CHECK(q.step(), internal, "run row {} vanished", seq);
  return run_from_row(q);
}

}  // namespace

bool is_run_status(const std::string& status) {
  return status == "queued" || status == "running" || status == "stopped" ||
         status == "failed" || status == "done";
}

RunRecord Catalog::create_run(std::string_view tenant, const RunRecord& record,
                              std::string_view actor) {
  check_name("tenant", tenant);
  const json config = json::parse(record.config_json, nullptr, /*allow_exceptions=*/false);
  SPINDLE_CHECK(config.is_object(), invalid_argument, "run config must be a JSON object");
  SPINDLE_CHECK(record.steps >= 0, invalid_argument, "run steps must be >= 0, got {}",
                record.steps);
  detail::WriteTxn txn(impl_->db);
  const int64_t tid = impl_->ensure_tenant(tenant, actor);
  const int64_t now = impl_->now();
  const std::string id = new_run_id();
  impl_->db
      .query(
          "INSERT INTO runs(id, tenant_id, config_json, status, created_ms, updated_ms, steps, "
          "policies) VALUES (?1, ?2, ?3, 'queued', ?4, ?4, ?5, ?6)")
      .bind(1, id)
      .bind(2, tid)
      .bind(3, record.config_json)
      .bind(4, now)
      .bind(5, record.steps)
      .bind(6, json(record.policies).dump())
      .run();
  const int64_t seq = impl_->db.last_insert_rowid();
  impl_->audit(tid, actor, "create_run", id, json{{"steps", record.steps}}.dump());
  txn.commit();
  return run_by_seq(*impl_, seq);
}

RunRecord Catalog::update_run(std::string_view tenant, std::string_view run_id,
                              const RunUpdate& update) {
  if (update.status) {
    SPINDLE_CHECK(is_run_status(*update.status), invalid_argument,
                  "run status must be queued|running|stopped|failed|done, got '{}'",
                  *update.status);
  }
  detail::WriteTxn txn(impl_->db);
  const int64_t seq = require_run_seq(*impl_, tenant, run_id);
  const RunRecord cur = run_by_seq(*impl_, seq);
  impl_->db
      .query(
          "UPDATE runs SET status = ?1, error = ?2, step = ?3, policies = ?4, updated_ms = ?5 "
          "WHERE seq = ?6")
      .bind(1, update.status.value_or(cur.status))
      .bind(2, update.error.value_or(cur.error))
      .bind(3, update.step.value_or(cur.step))
      .bind(4, json(update.policies.value_or(cur.policies)).dump())
      .bind(5, impl_->now())
      .bind(6, seq)
      .run();
  txn.commit();
  return run_by_seq(*impl_, seq);
}

RunRecord Catalog::get_run(std::string_view tenant, std::string_view run_id) {
  detail::ReadTxn snapshot(impl_->db);
  return run_by_seq(*impl_, require_run_seq(*impl_, tenant, run_id));
}

RunPage Catalog::list_runs(std::string_view tenant, const RunQuery& query) {
  SPINDLE_CHECK(query.limit >= 1, invalid_argument, "limit must be >= 1, got {}", query.limit);
  int64_t before = INT64_MAX;
  if (!query.cursor.empty()) {
    try {
      size_t used = 0;
      before = std::stoll(query.cursor, &used);
      SPINDLE_CHECK(used == query.cursor.size(), invalid_argument, "bad cursor");
    } catch (const std::logic_error&) {
      SPINDLE_THROW(invalid_argument, "bad run list cursor '{}'", query.cursor);
    }
  }
  RunPage page;
  detail::ReadTxn snapshot(impl_->db);
  const auto tid = impl_->find_tenant(tenant);
  if (!tid) return page;
  auto q = impl_->db.query(std::string(kRunSelect) +
                           "WHERE r.tenant_id = ?1 AND r.seq < ?2 ORDER BY r.seq DESC LIMIT ?3");
  q.bind(1, *tid).bind(2, before).bind(3, int64_t(query.limit) + 1);
  int64_t last_seq = 0;
  while (q.step()) {
    if (int(page.items.size()) == query.limit) {
      page.next_cursor = std::to_string(last_seq);
      break;
    }
    last_seq = q.int64(0);
    page.items.push_back(run_from_row(q));
  }
  return page;
}

void Catalog::append_run_metrics(std::string_view tenant, std::string_view run_id,
                                 const RunMetric& metric) {
  const std::string metrics = canonical_json_object(metric.metrics_json, "run metrics");
  detail::WriteTxn txn(impl_->db);
  const int64_t seq = require_run_seq(*impl_, tenant, run_id);
  impl_->db
      .query(
          "INSERT OR REPLACE INTO run_metrics(run_seq, step, policy, metrics_json, created_ms) "
          "VALUES (?1, ?2, ?3, ?4, ?5)")
      .bind(1, seq)
      .bind(2, metric.step)
      .bind(3, metric.policy)
      .bind(4, metrics)
      .bind(5, impl_->now())
      .run();
  txn.commit();
}

std::vector<RunMetric> Catalog::run_metrics(std::string_view tenant, std::string_view run_id,
                                            int64_t since_step) {
  detail::ReadTxn snapshot(impl_->db);
  const int64_t seq = require_run_seq(*impl_, tenant, run_id);
  auto q = impl_->db.query(
      "SELECT step, policy, metrics_json, created_ms FROM run_metrics "
      "WHERE run_seq = ?1 AND step >= ?2 ORDER BY step, policy");
  q.bind(1, seq).bind(2, since_step);
  std::vector<RunMetric> out;
  while (q.step()) out.push_back({q.int64(0), q.text(1), q.text(2), q.int64(3)});
  return out;
}

std::vector<std::string> Catalog::interrupt_running_runs(std::string_view actor) {
  detail::WriteTxn txn(impl_->db);
  std::vector<std::pair<std::string, int64_t>> running;
  {
    auto q = impl_->db.query("SELECT id, tenant_id FROM runs WHERE status = 'running'");
    while (q.step()) running.emplace_back(q.text(0), q.int64(1));
  }
  std::vector<std::string> ids;
  for (const auto& [id, tid] : running) {
    impl_->db
        .query(
            "UPDATE runs SET status = 'stopped', error = 'interrupted: the daemon stopped', "
            "updated_ms = ?1 WHERE id = ?2")
        .bind(1, impl_->now())
        .bind(2, id)
        .run();
    impl_->audit(tid, actor, "interrupt_run", id, "{}");
    ids.push_back(id);
  }
  txn.commit();
  return ids;
}

}  // namespace spindle::catalog
