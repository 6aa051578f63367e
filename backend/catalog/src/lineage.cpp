// Lineage: ancestors (parent links, nearest first) and descendants (breadth-first) of a
// revision, across forks, with recursive CTEs over revisions(id) and revisions(parent_id).
// Parent links never cross tenants (fork resolves its source inside the caller's tenant),
// and the outer queries re-check the tenant anyway.

#include "catalog_impl.h"
#include "spindle/core/error.h"

namespace spindle::catalog {

Lineage Catalog::lineage(std::string_view tenant, const Address& address,
                         const LineageOptions& options) {
  SPINDLE_CHECK(options.max_ancestors >= 0 && options.max_descendants >= 0 &&
                    options.max_depth >= 0,
                invalid_argument, "lineage limits must be >= 0");
  detail::ReadTxn snapshot(impl_->db);
  const PolicyRow p = impl_->require_policy(tenant, address);
  RevisionRow self = impl_->resolve_revision(p, address);
  Lineage out;
  if (options.max_ancestors > 0) {
    auto q = impl_->db.query(
        "WITH RECURSIVE anc(id, depth) AS ("
        "  SELECT parent_id, 1 FROM revisions WHERE id = ?1 AND parent_id IS NOT NULL"
        "  UNION ALL"
        "  SELECT r.parent_id, anc.depth + 1 FROM revisions r JOIN anc ON r.id = anc.id"
        "  WHERE r.parent_id IS NOT NULL AND anc.depth < ?2) " +
        std::string(kRevisionColumnsSql) + ", anc.depth " + kRevisionFromSql +
        "JOIN anc ON anc.id = r.id WHERE p.tenant_id = ?3 ORDER BY anc.depth");
    q.bind(1, self.revision.id).bind(2, int64_t(options.max_ancestors)).bind(3, p.tenant_id);
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
        "WITH RECURSIVE des(id, depth) AS ("
        "  SELECT ?1, 0"
        "  UNION ALL"
        "  SELECT r.id, des.depth + 1 FROM revisions r JOIN des ON r.parent_id = des.id"
        "  WHERE des.depth < ?2 LIMIT ?3) " +
        std::string(kRevisionColumnsSql) + ", des.depth " + kRevisionFromSql +
        "JOIN des ON des.id = r.id WHERE des.depth > 0 AND p.tenant_id = ?4 "
        "ORDER BY des.depth, r.created_ms, r.id");
    q.bind(1, self.revision.id)
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
