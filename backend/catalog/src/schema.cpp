// Schema and forward migrations. A migration is append-only: once released, its SQL never
// changes; later versions add new entries.

#include "schema.h"

#include "spindle/catalog/schema.h"
#include "spindle/core/error.h"

namespace spindle::catalog {
namespace detail {
namespace {

struct Migration {
  int version;
  const char* sql;
};

// Version 1: the relational core.
//  - Partial unique index on live (tenant, name): a soft-deleted name is free at once.
//  - Policy indexes serve get-by-name and keyset pages (name / updated, optionally per base)
//    in O(log n + page). head/fork indexes let foreign-key checks (GC deleting revisions)
//    find referencing policies without a scan.
//  - policy_tags carries the (immutable) policy name so a tag filter pages in name order
//    straight from its index.
//  - revisions are immutable (trigger); `id` is the content hash clients see, `seq` an
//    internal integer key. Links (parent, head, fork point) use seq: integer indexes are a
//    quarter the size of 64-hex ones and a new revision appends to them instead of landing
//    at a random place. Parent links form the lineage across forks. These FKs are deferred
//    so a transaction may insert a policy and its first revision in either order.
constexpr const char* kV1 = R"sql(
CREATE TABLE tenants(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  created_ms INTEGER NOT NULL);

CREATE TABLE base_models(
  id TEXT PRIMARY KEY,
  arch TEXT NOT NULL,
  path TEXT NOT NULL,
  checksum TEXT NOT NULL,
  created_ms INTEGER NOT NULL) WITHOUT ROWID;

CREATE TABLE policies(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id INTEGER NOT NULL REFERENCES tenants(id),
  name TEXT NOT NULL,
  base_id TEXT NOT NULL REFERENCES base_models(id),
  lora_rank INTEGER NOT NULL CHECK (lora_rank >= 1),
  lora_alpha REAL NOT NULL,
  lora_targets TEXT NOT NULL,
  use_rslora INTEGER NOT NULL CHECK (use_rslora IN (0, 1)),
  head_seq INTEGER REFERENCES revisions(seq) DEFERRABLE INITIALLY DEFERRED,
  forked_seq INTEGER REFERENCES revisions(seq) DEFERRABLE INITIALLY DEFERRED,
  description TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  deleted_ms INTEGER);
CREATE UNIQUE INDEX policies_by_name ON policies(tenant_id, name) WHERE deleted_ms IS NULL;
CREATE INDEX policies_by_updated ON policies(tenant_id, updated_ms, id) WHERE deleted_ms IS NULL;
CREATE INDEX policies_by_base_name ON policies(tenant_id, base_id, name)
  WHERE deleted_ms IS NULL;
CREATE INDEX policies_by_base_updated ON policies(tenant_id, base_id, updated_ms, id)
  WHERE deleted_ms IS NULL;
CREATE INDEX policies_deleted ON policies(deleted_ms) WHERE deleted_ms IS NOT NULL;
CREATE INDEX policies_by_head ON policies(head_seq) WHERE head_seq IS NOT NULL;
CREATE INDEX policies_by_fork ON policies(forked_seq) WHERE forked_seq IS NOT NULL;

CREATE TABLE policy_tags(
  policy_id INTEGER NOT NULL REFERENCES policies(id) ON DELETE CASCADE,
  tenant_id INTEGER NOT NULL,
  tag TEXT NOT NULL,
  name TEXT NOT NULL,
  PRIMARY KEY (policy_id, tag)) WITHOUT ROWID;
CREATE INDEX policy_tags_by_tag ON policy_tags(tenant_id, tag, name, policy_id);

CREATE TABLE revisions(
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  policy_id INTEGER NOT NULL REFERENCES policies(id),
  parent_seq INTEGER REFERENCES revisions(seq) DEFERRABLE INITIALLY DEFERRED,
  step INTEGER NOT NULL,
  blob TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  metrics TEXT NOT NULL DEFAULT '{}',
  created_ms INTEGER NOT NULL);
CREATE INDEX revisions_by_parent ON revisions(parent_seq) WHERE parent_seq IS NOT NULL;
CREATE INDEX revisions_by_policy ON revisions(policy_id);
CREATE INDEX revisions_by_blob ON revisions(blob);
CREATE TRIGGER revisions_immutable BEFORE UPDATE ON revisions
BEGIN
  SELECT RAISE(ABORT, 'revisions are immutable');
END;

CREATE TABLE audit(
  id INTEGER PRIMARY KEY,
  at_ms INTEGER NOT NULL,
  tenant_id INTEGER REFERENCES tenants(id),
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT '{}');
CREATE INDEX audit_by_tenant ON audit(tenant_id, id);
)sql";

// Version 2: full-text search. One FTS5 row per live policy (rowid = policy id). The tenant
// is an indexed token ("t<id>") so a search intersects with the caller's tenant inside the
// index instead of filtering every match afterwards. Triggers keep it in sync; commits do
// not touch it (they change neither name, description nor tags). No prefix indexes: they
// triple the tokens written per policy for a speed-up only on 1-3 character prefixes.
constexpr const char* kV2 = R"sql(
CREATE VIRTUAL TABLE policy_fts USING fts5(
  tenant, name, description, tags,
  tokenize = 'unicode61 remove_diacritics 2');

INSERT INTO policy_fts(rowid, tenant, name, description, tags)
  SELECT p.id, 't' || p.tenant_id, p.name, p.description,
         coalesce((SELECT group_concat(g.tag, ' ') FROM policy_tags g WHERE g.policy_id = p.id), '')
  FROM policies p WHERE p.deleted_ms IS NULL;

CREATE TRIGGER policies_fts_insert AFTER INSERT ON policies WHEN new.deleted_ms IS NULL
BEGIN
  INSERT INTO policy_fts(rowid, tenant, name, description, tags)
    VALUES (new.id, 't' || new.tenant_id, new.name, new.description, '');
END;

CREATE TRIGGER policies_fts_update AFTER UPDATE OF name, description, deleted_ms ON policies
BEGIN
  DELETE FROM policy_fts WHERE rowid = old.id;
  INSERT INTO policy_fts(rowid, tenant, name, description, tags)
    SELECT new.id, 't' || new.tenant_id, new.name, new.description,
           coalesce((SELECT group_concat(tag, ' ') FROM policy_tags WHERE policy_id = new.id), '')
    WHERE new.deleted_ms IS NULL;
END;

CREATE TRIGGER policies_fts_delete AFTER DELETE ON policies
BEGIN
  DELETE FROM policy_fts WHERE rowid = old.id;
END;

CREATE TRIGGER policy_tags_fts_insert AFTER INSERT ON policy_tags
BEGIN
  UPDATE policy_fts
    SET tags = (SELECT group_concat(tag, ' ') FROM policy_tags WHERE policy_id = new.policy_id)
    WHERE rowid = new.policy_id;
END;

CREATE TRIGGER policy_tags_fts_delete AFTER DELETE ON policy_tags
BEGIN
  UPDATE policy_fts
    SET tags = coalesce((SELECT group_concat(tag, ' ') FROM policy_tags
                         WHERE policy_id = old.policy_id), '')
    WHERE rowid = old.policy_id;
END;
)sql";

// Version 3: a revision may carry its optimizer state (AdamW moments) as a second blob, so
// training resumes exactly from any revision. NULL for revisions saved without state.
constexpr const char* kV3 = R"sql(
ALTER TABLE revisions ADD COLUMN state_blob TEXT;
CREATE INDEX revisions_by_state_blob ON revisions(state_blob) WHERE state_blob IS NOT NULL;
)sql";

// Version 4: GRPO run records and their metrics timeline. `id` is the run's public id; `seq`
// orders pages (newest first). `policies` is a JSON list of addresses. One metrics row per
// (run, step, policy); a re-recorded step replaces its row.
constexpr const char* kV4 = R"sql(
CREATE TABLE runs(
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  tenant_id INTEGER NOT NULL REFERENCES tenants(id),
  config_json TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'stopped', 'failed', 'done')),
  error TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  step INTEGER NOT NULL DEFAULT 0,
  steps INTEGER NOT NULL,
  policies TEXT NOT NULL DEFAULT '[]');
CREATE INDEX runs_by_tenant ON runs(tenant_id, seq);
CREATE INDEX runs_by_status ON runs(status);

CREATE TABLE run_metrics(
  run_seq INTEGER NOT NULL REFERENCES runs(seq) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  policy TEXT NOT NULL,
  metrics_json TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (run_seq, step, policy)) WITHOUT ROWID;
)sql";

// Version 5: Tinker's drop-in.
//  - policies.user_metadata: the creating client's user_metadata ("" or a JSON object).
//  - revision_expiry: one row per ephemeral revision (revisions are immutable, so expiry lives
//    beside them). No row = durable; promote deletes the row. expired_ms is set when
//    collect_expired collected it (blobs released; the revision row stays for lineage). The
//    partial index holds only rows still to collect, so collecting costs O(due). Deleting a
//    revision (gc) deletes its row with it.
constexpr const char* kV5 = R"sql(
ALTER TABLE policies ADD COLUMN user_metadata TEXT NOT NULL DEFAULT '';
CREATE TABLE revision_expiry(
  seq INTEGER PRIMARY KEY REFERENCES revisions(seq) ON DELETE CASCADE,
  expires_ms INTEGER NOT NULL,
  expired_ms INTEGER);
CREATE INDEX revision_expiry_due ON revision_expiry(expires_ms) WHERE expired_ms IS NULL;
)sql";

const Migration kMigrations[] = {{1, kV1}, {2, kV2}, {3, kV3}, {4, kV4}, {5, kV5}};
constexpr int kLatest = 5;

}  // namespace

int read_schema_version(Db& db) {
  const auto has_table = db.scalar(
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'");
  if (!has_table || *has_table == 0) return 0;
  return int(db.scalar("SELECT version FROM schema_version").value_or(0));
}

void migrate_db(Db& db, int target) {
  SPINDLE_CHECK(target >= 0 && target <= kLatest, invalid_argument,
                "catalog: schema version {} does not exist (latest is {})", target, kLatest);
  if (read_schema_version(db) >= target) {  // the common case: no write lock needed
    const int current = read_schema_version(db);
    SPINDLE_CHECK(current <= kLatest, unsupported,
                  "catalog: {} has schema version {}, newer than this build understands ({}); "
                  "upgrade Spindle",
                  db.file().string(), current, kLatest);
    return;
  }
  WriteTxn txn(db);
  const int current = read_schema_version(db);  // again, under the write lock
  SPINDLE_CHECK(current <= kLatest, unsupported,
                "catalog: {} has schema version {}, newer than this build understands ({})",
                db.file().string(), current, kLatest);
  if (current == 0)
    db.exec(
        "CREATE TABLE schema_version(version INTEGER NOT NULL);"
        "INSERT INTO schema_version VALUES (0);");
  for (const Migration& m : kMigrations) {
    if (m.version <= current || m.version > target) continue;
    db.exec(m.sql);
    db.query("UPDATE schema_version SET version = ?1").bind(1, int64_t(m.version)).run();
  }
  txn.commit();
}

}  // namespace detail

int latest_schema_version() {
  return detail::kLatest;
}

int schema_version(const std::filesystem::path& data_dir) {
  detail::Db db(data_dir / "catalog.db", {});
  return detail::read_schema_version(db);
}

void migrate(const std::filesystem::path& data_dir, int target) {
  std::filesystem::create_directories(data_dir);
  detail::Db db(data_dir / "catalog.db", {});
  detail::migrate_db(db, target);
}

}  // namespace spindle::catalog
