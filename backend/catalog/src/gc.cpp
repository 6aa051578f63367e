// Garbage collection: purge soft-deleted policies past retention, then unreferenced blobs.
//
// Rows: the candidates are the revisions of purgeable policies (deleted before the cutoff).
// A candidate is kept when something that stays depends on it: a revision of a policy that
// stays has it as parent, a policy that stays has it as head or fork point, or a kept
// candidate has it as parent (closure over parent links). Everything else goes, in one
// transaction; a purgeable policy with kept revisions stays as a tombstone (deleted, not
// addressable, head cleared) until its last revision is released.
//
// Deleting a revision deletes its revision_expiry row with it (ON DELETE CASCADE, schema v5).
//
// Blobs: BlobStore::gc with run_batch = this connection's write transaction, so "is any live
// revision referencing this blob?" and the unlink happen while no commit can run; a commit
// re-checks (and if needed re-writes) its blob inside its own write transaction. Revisions
// that collect_expired collected do not count as references (their blobs are released; one
// still on disk is left over from a crash mid-collection, or was shared with a revision that
// is gone now).

#include <nlohmann/json.hpp>

#include "catalog_impl.h"
#include "spindle/core/error.h"

namespace spindle::catalog {

GcReport Catalog::gc(const GcOptions& options) {
  SPINDLE_CHECK(options.retention.count() >= 0, invalid_argument,
                "gc retention must be >= 0, got {} ms", options.retention.count());
  auto& db = impl_->db;
  const int64_t cutoff = impl_->now() - options.retention.count();
  GcReport report;
  {
    detail::WriteTxn txn(db);
    db.exec(
        "CREATE TEMP TABLE IF NOT EXISTS gc_candidates(seq INTEGER PRIMARY KEY);"
        "CREATE TEMP TABLE IF NOT EXISTS gc_purgeable(id INTEGER PRIMARY KEY);"
        "DELETE FROM gc_candidates; DELETE FROM gc_purgeable;");
    db.query(
          "INSERT INTO gc_purgeable SELECT id FROM policies "
          "WHERE deleted_ms IS NOT NULL AND deleted_ms <= ?1")
        .bind(1, cutoff)
        .run();
    db.exec(
        "INSERT INTO gc_candidates SELECT r.seq FROM revisions r "
        "  WHERE r.policy_id IN (SELECT id FROM gc_purgeable);"
        "WITH RECURSIVE keep(seq) AS ("
        "  SELECT r.parent_seq FROM revisions r"
        "    WHERE r.parent_seq IN (SELECT seq FROM gc_candidates)"
        "      AND r.policy_id NOT IN (SELECT id FROM gc_purgeable)"
        "  UNION SELECT head_seq FROM policies"
        "    WHERE head_seq IN (SELECT seq FROM gc_candidates)"
        "      AND id NOT IN (SELECT id FROM gc_purgeable)"
        "  UNION SELECT forked_seq FROM policies"
        "    WHERE forked_seq IN (SELECT seq FROM gc_candidates)"
        "      AND id NOT IN (SELECT id FROM gc_purgeable)"
        "  UNION SELECT r.parent_seq FROM revisions r JOIN keep ON r.seq = keep.seq"
        "    WHERE r.parent_seq IN (SELECT seq FROM gc_candidates))"
        "DELETE FROM gc_candidates WHERE seq IN (SELECT seq FROM keep);"
        // Tombstones no longer point anywhere (their targets may be going).
        "UPDATE policies SET head_seq = NULL, forked_seq = NULL"
        "  WHERE id IN (SELECT id FROM gc_purgeable);");
    db.exec("DELETE FROM revisions WHERE seq IN (SELECT seq FROM gc_candidates)");
    report.revisions_purged = db.changes();
    db.exec(
        "DELETE FROM policies WHERE id IN (SELECT id FROM gc_purgeable)"
        "  AND NOT EXISTS (SELECT 1 FROM revisions r WHERE r.policy_id = policies.id)");
    report.policies_purged = db.changes();
    report.policies_waiting =
        db.scalar("SELECT count(*) FROM policies WHERE id IN (SELECT id FROM gc_purgeable)")
            .value_or(0);
    impl_->audit(std::nullopt, options.actor, "gc", "catalog",
                 nlohmann::json{{"cutoff_ms", cutoff},
                                {"policies_purged", report.policies_purged},
                                {"revisions_purged", report.revisions_purged},
                                {"policies_waiting", report.policies_waiting}}
                     .dump());
    txn.commit();
  }

  adapters::BlobGcOptions blob_options;
  blob_options.grace = options.blob_grace;
  blob_options.run_batch = [&](const std::function<void()>& batch) {
    detail::WriteTxn txn(db);
    batch();
    txn.commit();
  };
  report.blobs = impl_->blobs.gc(
      [&](std::string_view blob) { return impl_->blob_referenced_live(blob); },
      blob_options);
  return report;
}

}  // namespace spindle::catalog
