#pragma once
// The policy catalog: SQLite (WAL, foreign keys on, synchronous=FULL) at
// <data_dir>/catalog.db plus the content-addressed blob store at <data_dir>/blobs.
//
// Tenancy: every method a client can reach takes the tenant and resolves policies only inside
// it. A policy of another tenant is reported exactly like a missing one (not_found, same
// message), so no call reveals that it exists. Tenants are created on first write.
// Operator-only calls (base models, gc, check) are global and marked so.
//
// Commit order (DESIGN.md idea 3): the revision file is written to the blob store and made
// durable; then one write transaction re-checks the blob, inserts the revision row, moves the
// head and appends the audit row; the commit returns (acknowledges) only after that
// transaction is fsynced. A crash at any point loses nothing acknowledged; at worst it
// leaves an unreferenced blob, which gc() reclaims.
//
// Every mutation appends an audit row (who, what, when) in the same transaction.
//
// Threading: a Catalog is one SQLite connection; use it from one thread at a time (give each
// thread its own Catalog). Any number of Catalogs, in any processes, may open the same data
// directory: SQLite serialises writers (waiting up to busy_timeout_ms), readers never block.

#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/adapters/blob_store.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/catalog/address.h"
#include "spindle/catalog/runs.h"
#include "spindle/catalog/types.h"
#include "spindle/engine/lora.h"

namespace spindle::catalog {

struct CatalogOptions {
  std::function<int64_t()> clock_ms;  // default: system clock; tests inject a fake one
  int busy_timeout_ms = 10000;
  int64_t cache_mib = 64;  // SQLite page cache of this connection
  // PRAGMA quick_check before anything else (before the schema migration writes): a damaged
  // catalog.db throws data_loss naming the file and the problems, so nothing (spindled, the
  // CLI) serves from it. Cost: one read of the whole file (docs/decisions.md has the figure).
  bool quick_check = true;
};

class Catalog {
 public:
  // Opens or creates the catalog in `data_dir` (created if missing) and migrates its schema
  // forward. Throws unsupported for a database written by a newer Spindle, data_loss for a
  // damaged one (CatalogOptions::quick_check, or SQLite reporting SQLITE_CORRUPT/NOTADB).
  //
  // Errors of every method: a full disk or quota (SQLITE_FULL, ENOSPC, EDQUOT, in the blob
  // store or the database) is `resource` naming the path, and nothing of that call is
  // committed; a blob failing its checksum, or SQLite finding the file damaged, is data_loss
  // naming the revision and the blob, or catalog.db.
  explicit Catalog(const std::filesystem::path& data_dir, CatalogOptions options = {});
  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  const std::filesystem::path& data_dir() const;
  const adapters::BlobStore& blobs() const;

  // ---- base models (operator) -------------------------------------------------------------
  // Idempotent for identical fields; invalid_argument if the id exists with other fields.
  void register_base(const BaseModel& base, std::string_view actor);
  BaseModel get_base(std::string_view id);  // not_found
  std::vector<BaseModel> list_bases();

  // ---- policies (tenant-scoped) -----------------------------------------------------------
  Policy create_policy(std::string_view tenant, const PolicySpec& spec, std::string_view actor);
  // Encodes `weights` as a revision file, stores it, commits it on top of the head.
  Revision commit_revision(std::string_view tenant, std::string_view policy,
                           const engine::LoraWeights& weights, const CommitOptions& options);
  Policy get_policy(std::string_view tenant, std::string_view policy);
  // Get by address: the policy and the revision the address names (the head for @latest).
  Resolved get(std::string_view tenant, const Address& address);
  // The revision's file read from the blob store, checksum verified, decoded.
  adapters::DecodedRevision read_revision(std::string_view tenant, const Address& address);
  // The optimizer state saved with the revision (CommitOptions::optimizer_state), checksum
  // verified; nullopt when the revision was saved without one.
  std::optional<engine::AdamW> read_optimizer_state(std::string_view tenant,
                                                    const Address& address);

  PolicyPage list(std::string_view tenant, const ListQuery& query);
  // Full-text search over name, description and tags (FTS5, bm25 order). Every word of
  // `text` must match (as a prefix) in one of those fields.
  std::vector<Policy> search(std::string_view tenant, std::string_view text, int limit = 20);
  Lineage lineage(std::string_view tenant, const Address& address,
                  const LineageOptions& options = {});

  // A new policy whose head is the addressed revision (same base and LoRA spec); the
  // lineage is kept: its next commit's parent is that revision.
  Policy fork(std::string_view tenant, const Address& from, std::string_view new_name,
              std::string_view actor);
  // head := the addressed revision (one of the policy's own or of its fork ancestry; an
  // explicit revision, not @latest). Recorded in the audit log; nothing is deleted.
  Policy rollback(std::string_view tenant, const Address& to, std::string_view actor);
  Policy tag(std::string_view tenant, std::string_view policy, std::string_view tag,
             std::string_view actor);
  Policy untag(std::string_view tenant, std::string_view policy, std::string_view tag,
               std::string_view actor);
  // An ephemeral revision made durable (idempotent on a durable one); audit "promote".
  // not_found when the revision already expired (naming when).
  Revision promote_revision(std::string_view tenant, const Address& address,
                            std::string_view actor);
  // Operator, every tenant: collects the ephemeral revisions whose expires_ms <= now that are
  // not collected yet: marks them expired and deletes their weights and state blobs unless a
  // live (durable or unexpired) revision references the same blob. Addressing a collected
  // revision (get, read_revision, a head that expired) is not_found "... expired at ...".
  // Cost: O(revisions due) via an index, never a scan of all revisions or blobs.
  ExpiryReport collect_expired(std::string_view actor);

  // Soft delete: the name is free again at once, the rows stay until gc() after retention.
  void remove(std::string_view tenant, std::string_view policy, std::string_view actor);

  // Registers many policies with one revision each in one transaction (blobs already
  // stored; each distinct blob is read and checked against its entries once). Returns the
  // number registered. All or nothing.
  size_t bulk_register(std::string_view tenant, std::span<const BulkEntry> entries,
                       std::string_view actor);

  // Newest first; before_id pages backwards (AuditEntry::id of the last entry seen).
  std::vector<AuditEntry> audit_log(std::string_view tenant, int limit = 100,
                                    std::optional<int64_t> before_id = std::nullopt);

  // ---- runs (tenant-scoped; runs.h) ---------------------------------------------------------
  // A new run record (status "queued", step 0, a fresh random id). config_json must be a JSON
  // object; `steps` and `policies` are taken from `record`, other fields are ignored.
  RunRecord create_run(std::string_view tenant, const RunRecord& record, std::string_view actor);
  // not_found when the run does not exist in `tenant`; invalid_argument for an unknown status.
  RunRecord update_run(std::string_view tenant, std::string_view run_id, const RunUpdate& update);
  RunRecord get_run(std::string_view tenant, std::string_view run_id);
  RunPage list_runs(std::string_view tenant, const RunQuery& query = {});
  void append_run_metrics(std::string_view tenant, std::string_view run_id, const RunMetric& metric);
  // The run's metrics with step >= since_step, in (step, policy) order.
  std::vector<RunMetric> run_metrics(std::string_view tenant, std::string_view run_id,
                                     int64_t since_step = 0);
  // Operator, at daemon start: every run still "running" (its daemon died or stopped under
  // it) becomes "stopped", so it can be resumed. Returns their ids.
  std::vector<std::string> interrupt_running_runs(std::string_view actor);

  // ---- maintenance (operator) -------------------------------------------------------------
  // Purges soft-deleted policies past retention, then deletes unreferenced blobs (a blob that
  // only collected ephemeral revisions name is unreferenced; gc does not collect them itself:
  // run collect_expired first). Blob
  // deletion runs in batches inside the catalog's write transaction, so it never races a
  // commit (which re-checks its blob inside its own write transaction).
  GcReport gc(const GcOptions& options);
  // integrity_check, foreign_key_check, every live revision's blobs (weights and optimizer
  // state) present and, with options.verify_blobs, hashing to their names. A blob reported
  // missing or corrupt is still needed: it is re-checked against a fresh read after the scan
  // (collect_expired may release blobs meanwhile). Reads blobs outside any transaction. A
  // file SQLite cannot read at all is reported in `integrity` (the data_loss message), not
  // thrown.
  CheckReport check(const CheckOptions& options = {});

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace spindle::catalog
