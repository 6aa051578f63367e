// Catalog lifetime, base models, audit log reads and the consistency check.

#include "spindle/catalog/catalog.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

#include "catalog_impl.h"
#include "fts_rank.h"
#include "schema.h"
#include "spindle/catalog/schema.h"
#include "spindle/core/error.h"

namespace spindle::catalog {
namespace {

int64_t system_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::filesystem::path prepared_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  SPINDLE_CHECK(!ec, io, "catalog: cannot create data directory {}: {}", dir.string(),
                ec.message());
  return dir;
}

}  // namespace

Catalog::Impl::Impl(const std::filesystem::path& dir, const CatalogOptions& options)
    : data_dir(prepared_dir(dir)),
      db(dir / "catalog.db",
         {.busy_timeout_ms = options.busy_timeout_ms,
          .cache_kib = options.cache_mib * 1024,
          .quick_check = options.quick_check}),
      blobs(dir / "blobs"),
      clock(options.clock_ms ? options.clock_ms : system_ms) {
  detail::migrate_db(db, latest_schema_version());
  detail::register_fts_rank(db.raw());
}

Catalog::Catalog(const std::filesystem::path& data_dir, CatalogOptions options)
    : impl_(std::make_unique<Impl>(data_dir, options)) {}

Catalog::~Catalog() = default;

const std::filesystem::path& Catalog::data_dir() const {
  return impl_->data_dir;
}
const adapters::BlobStore& Catalog::blobs() const {
  return impl_->blobs;
}

// ---- base models --------------------------------------------------------------------------

void Catalog::register_base(const BaseModel& base, std::string_view actor) {
  check_base_id(base.id);
  SPINDLE_CHECK(!base.arch.empty(), invalid_argument, "base model {}: arch is empty", base.id);
  detail::WriteTxn txn(impl_->db);
  auto q = impl_->db.query("SELECT arch, path, checksum FROM base_models WHERE id = ?1");
  q.bind(1, base.id);
  if (q.step()) {
    SPINDLE_CHECK(q.text(0) == base.arch && q.text(1) == base.path && q.text(2) == base.checksum,
                  invalid_argument,
                  "base model {} is already registered with arch '{}', path '{}', checksum '{}'",
                  base.id, q.text(0), q.text(1), q.text(2));
    return;  // identical: nothing to do (the transaction rolls back empty)
  }
  impl_->db
      .query(
          "INSERT INTO base_models(id, arch, path, checksum, created_ms) "
          "VALUES (?1, ?2, ?3, ?4, ?5)")
      .bind(1, base.id)
      .bind(2, base.arch)
      .bind(3, base.path)
      .bind(4, base.checksum)
      .bind(5, impl_->now())
      .run();
  impl_->audit(
      std::nullopt, actor, "register_base", base.id,
      nlohmann::json{{"arch", base.arch}, {"path", base.path}, {"checksum", base.checksum}}.dump());
  txn.commit();
}

BaseModel Catalog::get_base(std::string_view id) {
  auto q =
      impl_->db.query("SELECT id, arch, path, checksum, created_ms FROM base_models WHERE id = ?1");
  q.bind(1, id);
  SPINDLE_CHECK(q.step(), not_found, "base model '{}' is not registered", id);
  return {q.text(0), q.text(1), q.text(2), q.text(3), q.int64(4)};
}

std::vector<BaseModel> Catalog::list_bases() {
  auto q =
      impl_->db.query("SELECT id, arch, path, checksum, created_ms FROM base_models ORDER BY id");
  std::vector<BaseModel> out;
  while (q.step()) out.push_back({q.text(0), q.text(1), q.text(2), q.text(3), q.int64(4)});
  return out;
}

// ---- audit --------------------------------------------------------------------------------

std::vector<AuditEntry> Catalog::audit_log(std::string_view tenant, int limit,
                                           std::optional<int64_t> before_id) {
  check_name("tenant", tenant);
  SPINDLE_CHECK(limit >= 1 && limit <= 10000, invalid_argument,
                "audit log limit must be in 1..10000, got {}", limit);
  std::vector<AuditEntry> out;
  const auto tid = impl_->find_tenant(tenant);
  if (!tid) return out;
  auto q = impl_->db.query(
      "SELECT id, at_ms, actor, action, target, detail FROM audit "
      "WHERE tenant_id = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3");
  q.bind(1, *tid).bind(2, before_id.value_or(INT64_MAX)).bind(3, int64_t(limit));
  while (q.step()) {
    out.push_back({q.int64(0), q.int64(1), q.text(2), q.text(3), q.text(4), q.text(5)});
  }
  return out;
}

// ---- check --------------------------------------------------------------------------------

std::vector<std::string> Catalog::Impl::live_revisions_naming(std::string_view blob) {
  auto q = db.query(
      "SELECT t.name, p.name, r.id, r.blob = ?1 FROM revisions r JOIN policies p ON p.id = "
      "r.policy_id JOIN tenants t ON t.id = p.tenant_id WHERE (r.blob = ?1 OR r.state_blob = "
      "?1) AND NOT EXISTS (SELECT 1 FROM revision_expiry e WHERE e.seq = r.seq AND "
      "e.expired_ms IS NOT NULL) ORDER BY r.seq");
  q.bind(1, blob);
  std::vector<std::string> out;
  while (q.step()) {
    out.push_back(fmt::format("spindle://{}/{}@{}{}", q.text(0), q.text(1), q.text(2),
                              q.int64(3) ? "" : " (optimizer state)"));
  }
  return out;
}

namespace {

// Catalog::check without the data_loss guard.
void check_database(Catalog::Impl& impl, CheckReport& report, const CheckOptions& options) {
  auto& db = impl.db;
  {
    auto q = db.query("PRAGMA integrity_check");
    std::string all;
    while (q.step()) all += (all.empty() ? "" : "; ") + q.text(0);
    report.integrity = all;
  }
  {
    auto q = db.query("PRAGMA foreign_key_check");
    while (q.step()) {
      report.foreign_keys.push_back(
          fmt::format("{} row {} -> {}", q.text(0), q.text(1), q.text(2)));
    }
  }
  // Only live revisions need their blobs: a collected ephemeral one released them. The list
  // comes from one snapshot; the blobs are read after it ends, so a long verification never
  // holds a read transaction (which would stop checkpoints and let the WAL grow).
  std::vector<std::string> blobs;
  {
    detail::ReadTxn snapshot(db);
    auto q = db.query(
        "SELECT r.blob, count(*) FROM revisions r WHERE NOT EXISTS (SELECT 1 FROM "
        "revision_expiry e WHERE e.seq = r.seq AND e.expired_ms IS NOT NULL) GROUP BY r.blob");
    while (q.step()) {
      report.revisions += q.int64(1);
      blobs.push_back(q.text(0));
    }
    auto s = db.query(
        "SELECT DISTINCT r.state_blob FROM revisions r WHERE r.state_blob IS NOT NULL AND NOT "
        "EXISTS (SELECT 1 FROM revision_expiry e WHERE e.seq = r.seq AND e.expired_ms IS NOT "
        "NULL)");
    while (s.step()) blobs.push_back(s.text(0));
  }
  std::sort(blobs.begin(), blobs.end());
  blobs.erase(std::unique(blobs.begin(), blobs.end()), blobs.end());
  for (const std::string& blob : blobs) {
    if (!impl.blobs.exists(blob)) {
      if (!impl.live_revisions_naming(blob).empty()) report.missing_blobs.push_back(blob);
      continue;
    }
    if (!options.verify_blobs) continue;
    try {
      impl.blobs.get(blob);
      ++report.blobs_verified;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::not_found) {  // removed since exists(): still needed?
        if (!impl.live_revisions_naming(blob).empty()) report.missing_blobs.push_back(blob);
        continue;
      }
      if (e.code() != ErrorCode::data_loss) throw;
      ++report.blobs_verified;
      std::vector<std::string> revisions = impl.live_revisions_naming(blob);
      if (revisions.empty()) continue;  // released meanwhile: nothing needs it
      report.corrupt_blobs.push_back(
          {blob, impl.blobs.path_of(blob).string(), std::move(revisions), e.what()});
    }
  }
}

}  // namespace

CheckReport Catalog::check(const CheckOptions& options) {
  CheckReport report;
  try {
    check_database(*impl_, report, options);
  } catch (const Error& e) {
    // SQLite could not even read the file (SQLITE_CORRUPT/NOTADB): that is the report.
    if (e.code() != ErrorCode::data_loss) throw;
    report.integrity = report.integrity.empty() || report.integrity == "ok"
                           ? e.what()
                           : report.integrity + "; " + e.what();
  }
  return report;
}

}  // namespace spindle::catalog
