// Lineage: ancestors (parent links, nearest first) and descendants (breadth-first) of a
// revision, across forks, with recursive CTEs over revisions(seq) and revisions(parent_seq).
// Parent links never cross tenants (fork resolves its source inside the caller's tenant),
// and the outer queries re-check the tenant anyway.

#include "catalog_impl.h"
#include "spindle/core/error.h"

namespace spindle::catalog {

Lineage Catalog::lineage(std::string_view tenant, const Address& address,
                         const LineageOptions& options) {
  SPINDLE_CHECK(
      options.max_ancestors >= 0 && options.max_descendants >= 0 && options.max_depth >= 0,
      invalid_argument, "lineage limits must be >= 0");
  detail::ReadTxn snapshot(impl_->db);
  const PolicyRow p = impl_->require_policy(tenant, address);
  RevisionRow self = impl_->resolve_revision(p, address);
  Lineage out;
  if (options.max_ancestors > 0) {
    auto q = impl_->db.query(
        "WITH RECURSIVE anc(seq, depth) AS ("
        "  SELECT parent_seq, 1 FROM revisions WHERE seq = ?1 AND parent_seq IS NOT NULL"
        "  UNION ALL"
        "  SELECT r.parent_seq, anc.depth + 1 FROM revisions r JOIN anc ON r.seq = anc.seq"
        "  WHERE r.parent_seq IS NOT NULL AND anc.depth < ?2) " +
        std::string(kRevisionColumnsSql) + ", anc.depth " + kRevisionFromSql +
        "JOIN anc ON anc.seq = r.seq WHERE p.tenant_id = ?3 ORDER BY anc.depth");
    q.bind(1, self.seq).bind(2, int64_t(options.max_ancestors)).bind(3, p.tenant_id);
    while (q.step()) {
      out.ancestors.push_back({revision_from_row(q).revision, int(q.int64(kRevisionColumns))});
    }
  }
  if (options.max_ancestors == 0) {
    out.ancestors_truncated = self.revision.parent.has_value();
  } else if (!out.ancestors.empty() && int(out.ancestors.size()) >= options.max_ancestors) {
    out.ancestors_truncated = out.ancestors.back().revision.parent.has_value();
  }
  {
    // LIMIT bounds the rows the recursion produces (the seed included), breadth-first.
    auto q = impl_->db.query(
        "WITH RECURSIVE des(seq, depth) AS ("
        "  SELECT ?1, 0"
        "  UNION ALL"
        "  SELECT r.seq, des.depth + 1 FROM revisions r JOIN des ON r.parent_seq = des.seq"
        "  WHERE des.depth < ?2 LIMIT ?3) " +
        std::string(kRevisionColumnsSql) + ", des.depth " + kRevisionFromSql +
        "JOIN des ON des.seq = r.seq WHERE des.depth > 0 AND p.tenant_id = ?4 "
        "ORDER BY des.depth, r.seq");
    q.bind(1, self.seq)
        .bind(2, int64_t(options.max_depth))
        .bind(3, int64_t(options.max_descendants) + 2)
        .bind(4, p.tenant_id);
    while (q.step()) {
      out.descendants.push_back({revision_from_row(q).revision, int(q.int64(kRevisionColumns))});
    }
  }
  if (out.descendants.size() > size_t(options.max_descendants)) {
    out.descendants.resize(size_t(options.max_descendants));
    out.descendants_truncated = true;
  }
  out.revision = std::move(self.revision);
  return out;
}

}  // namespace spindle::catalog
