// Ephemeral revisions (schema v5, table revision_expiry): promote, collect, and the expiry a
// commit records.
//
// Collection runs in batches of two write transactions each:
//  1. mark the due rows expired (expired_ms = now) and audit "expire" per revision;
//  2. delete each blob of the batch that no live revision (durable, or ephemeral and not
//     collected) names, checked and unlinked inside the transaction so that no commit can
//     start referencing it meanwhile (a commit re-checks and re-writes its blob inside its
//     own write transaction, revisions.cpp).
// A crash between 1 and 2 leaves blobs that only expired revisions name; gc() treats those
// as unreferenced and reclaims them.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "catalog_impl.h"
#include "spindle/core/error.h"

namespace spindle::catalog {
namespace {

using json = nlohmann::json;

// Rows per batch: bounds how long one transaction holds the write lock (and the unlinks done
// inside it) however many revisions fall due at once.
constexpr int64_t kCollectBatch = 256;

}  // namespace

void Catalog::Impl::record_expiry(int64_t seq, bool is_new, int64_t expires_ms) {
  if (is_new) {
    if (expires_ms == 0) return;
    db.query("INSERT INTO revision_expiry(seq, expires_ms) VALUES (?1, ?2)")
        .bind(1, seq)
        .bind(2, expires_ms)
        .run();
    return;
  }
  auto q =
      db.query("SELECT expires_ms, expired_ms IS NOT NULL FROM revision_expiry WHERE seq = ?1");
  q.bind(1, seq);
  if (!q.step()) return;  // durable stays durable
  const int64_t old_expires = q.int64(0);
  const bool collected = q.int64(1) != 0;
  if (expires_ms == 0) {  // a durable commit of the same revision promotes it
    db.query("DELETE FROM revision_expiry WHERE seq = ?1").bind(1, seq).run();
    return;
  }
  db.query("UPDATE revision_expiry SET expires_ms = ?1, expired_ms = NULL WHERE seq = ?2")
      .bind(1, collected ? expires_ms : std::max(old_expires, expires_ms))
      .bind(2, seq)
      .run();
}

bool Catalog::Impl::blob_referenced_live(std::string_view blob) {
  auto q = db.query(
      "SELECT 1 FROM revisions r WHERE r.blob = ?1 AND NOT EXISTS ("
      "  SELECT 1 FROM revision_expiry e WHERE e.seq = r.seq AND e.expired_ms IS NOT NULL) "
      "UNION ALL "
      "SELECT 1 FROM revisions r WHERE r.state_blob = ?1 AND NOT EXISTS ("
      "  SELECT 1 FROM revision_expiry e WHERE e.seq = r.seq AND e.expired_ms IS NOT NULL) "
      "LIMIT 1");
  q.bind(1, blob);
  return q.step();
}

Revision Catalog::promote_revision(std::string_view tenant, const Address& address,
                                   std::string_view actor) {
  detail::WriteTxn txn(impl_->db);
  const PolicyRow p = impl_->require_policy(tenant, address);
  const RevisionRow r = impl_->resolve_revision(p, address);
  impl_->require_unexpired(p, r, address);  // collected: its weights are gone
  // Durable already: nothing to do (the transaction rolls back empty). Past expires_ms but
  // not collected yet still counts as in time: it is servable until collected.
  if (r.revision.expires_ms == 0) return r.revision;
  impl_->db.query("DELETE FROM revision_expiry WHERE seq = ?1").bind(1, r.seq).run();
  impl_->audit(p.tenant_id, actor, "promote",
               fmt::format("spindle://{}/{}@{}", p.policy.tenant, r.revision.policy, r.revision.id),
               json{{"expires_ms", r.revision.expires_ms}}.dump());
  RevisionRow promoted = impl_->revision_by_seq(r.seq);
  txn.commit();
  return std::move(promoted.revision);
}

ExpiryReport Catalog::collect_expired(std::string_view actor) {
  auto& db = impl_->db;
  const int64_t now = impl_->now();
  ExpiryReport report;
  for (;;) {
    std::vector<ExpiredRevision> batch;
    std::set<std::string> blobs;  // weights and state blobs of the batch
    {
      detail::WriteTxn txn(db);
      std::vector<int64_t> due;
      {
        // revision_expiry_due holds only uncollected rows, ordered by expiry: O(due).
        auto q = db.query(
            "SELECT seq FROM revision_expiry WHERE expired_ms IS NULL AND expires_ms <= ?1 "
            "ORDER BY expires_ms LIMIT ?2");
        q.bind(1, now).bind(2, kCollectBatch);
        while (q.step()) due.push_back(q.int64(0));
      }
      if (due.empty()) break;
      for (const int64_t seq : due) {
        const RevisionRow r = impl_->revision_by_seq(seq);
        std::string tenant;
        {
          auto t = db.query("SELECT name FROM tenants WHERE id = ?1");
          t.bind(1, r.tenant_id);
          SPINDLE_CHECK(t.step(), internal, "catalog: tenant row {} vanished", r.tenant_id);
          tenant = t.text(0);
        }
        db.query("UPDATE revision_expiry SET expired_ms = ?1 WHERE seq = ?2")
            .bind(1, now)
            .bind(2, seq)
            .run();
        json detail{{"expires_ms", r.revision.expires_ms}, {"blob", r.revision.blob}};
        if (r.revision.state_blob) detail["state_blob"] = *r.revision.state_blob;
        impl_->audit(r.tenant_id, actor, "expire",
                     fmt::format("spindle://{}/{}@{}", tenant, r.revision.policy, r.revision.id),
                     detail.dump());
        blobs.insert(r.revision.blob);
        if (r.revision.state_blob) blobs.insert(*r.revision.state_blob);
        batch.push_back({tenant, r.revision.policy, r.revision.id, r.revision.blob});
      }
      txn.commit();
    }
    {
      detail::WriteTxn txn(db);
      for (const std::string& blob : blobs) {
        if (impl_->blob_referenced_live(blob)) continue;
        if (const auto size = impl_->blobs.remove(blob)) {
          ++report.blobs_deleted;
          report.bytes_freed += int64_t(*size);
        }
      }
      txn.commit();
    }
    const bool last = int64_t(batch.size()) < kCollectBatch;
    for (auto& e : batch) report.expired.push_back(std::move(e));
    if (last) break;
  }
  return report;
}

}  // namespace spindle::catalog
