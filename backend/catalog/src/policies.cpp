// Policy operations: create, get, fork, rollback, tag, untag, soft delete.

#include <nlohmann/json.hpp>

#include <algorithm>

#include "catalog_impl.h"
#include "spindle/core/error.h"

namespace spindle::catalog {

using json = nlohmann::json;

int64_t insert_policy(Catalog::Impl& impl, int64_t tenant_id, const PolicySpec& spec,
                      std::optional<int64_t> head_seq, std::optional<int64_t> forked_seq) {
  const int64_t now = impl.now();
  impl.db
      .query(
          "INSERT INTO policies(tenant_id, name, base_id, lora_rank, lora_alpha, lora_targets, "
          "use_rslora, head_seq, forked_seq, description, created_ms, updated_ms, "
          "user_metadata) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12)")
      .bind(1, tenant_id)
      .bind(2, spec.name)
      .bind(3, spec.base_id)
      .bind(4, spec.lora.rank)
      .bind(5, double(spec.lora.alpha))
      .bind(6, targets_to_csv(spec.lora.targets))
      .bind(7, int64_t(spec.lora.use_rslora))
      .bind(8, head_seq)
      .bind(9, forked_seq)
      .bind(10, spec.description)
      .bind(11, now)
      .bind(12, spec.user_metadata_json)
      .run();
  const int64_t id = impl.db.last_insert_rowid();
  for (const std::string& tag : spec.tags) {
    impl.db
        .query(
            "INSERT OR IGNORE INTO policy_tags(policy_id, tenant_id, tag, name) "
            "VALUES (?1, ?2, ?3, ?4)")
        .bind(1, id)
        .bind(2, tenant_id)
        .bind(3, tag)
        .bind(4, spec.name)
        .run();
  }
  return id;
}

Policy Catalog::create_policy(std::string_view tenant, const PolicySpec& spec,
                              std::string_view actor) {
  check_name("tenant", tenant);
  check_spec(spec);
  detail::WriteTxn txn(impl_->db);
  const int64_t tid = impl_->ensure_tenant(tenant, actor);
  const std::string address = fmt::format("spindle://{}/{}", tenant, spec.name);
  SPINDLE_CHECK(!impl_->find_policy(tid, tenant, spec.name), already_exists,
                "policy {} already exists", address);
  get_base(spec.base_id);  // not_found names the unregistered base
  const int64_t id = insert_policy(*impl_, tid, spec, std::nullopt, std::nullopt);
  impl_->audit(tid, actor, "create_policy", address,
               json{{"base", spec.base_id},
                    {"rank", spec.lora.rank},
                    {"alpha", spec.lora.alpha},
                    {"targets", targets_to_csv(spec.lora.targets)},
                    {"use_rslora", spec.lora.use_rslora}}
                   .dump());
  txn.commit();
  return impl_->policy_by_id(id).policy;
}

Policy Catalog::get_policy(std::string_view tenant, std::string_view policy) {
  return impl_->require_policy(tenant, policy).policy;
}

Resolved Catalog::get(std::string_view tenant, const Address& address) {
  detail::ReadTxn snapshot(impl_->db);
  PolicyRow p = impl_->require_policy(tenant, address);
  RevisionRow r = impl_->resolve_revision(p, address);
  impl_->require_unexpired(p, r, address);
  return {std::move(p.policy), std::move(r.revision)};
}

Policy Catalog::fork(std::string_view tenant, const Address& from, std::string_view new_name,
                     std::string_view actor) {
  check_name("policy name", new_name);
  detail::WriteTxn txn(impl_->db);
  const PolicyRow src = impl_->require_policy(tenant, from);
  const RevisionRow rev = impl_->resolve_revision(src, from);
  impl_->require_unexpired(src, rev, from);  // a fork's head must be servable
  const std::string address = fmt::format("spindle://{}/{}", tenant, new_name);
  SPINDLE_CHECK(!impl_->find_policy(src.tenant_id, tenant, new_name), already_exists,
                "policy {} already exists", address);
  const std::string origin = fmt::format("{}@{}", src.policy.address(), rev.revision.id);
  PolicySpec spec;
  spec.name = std::string(new_name);
  spec.base_id = src.policy.base_id;
  spec.lora = src.policy.lora;
  spec.description = src.policy.description;
  spec.user_metadata_json = src.policy.user_metadata_json;
  const int64_t id = insert_policy(*impl_, src.tenant_id, spec, rev.seq, rev.seq);
  impl_->audit(src.tenant_id, actor, "fork", address, json{{"from", origin}}.dump());
  txn.commit();
  return impl_->policy_by_id(id).policy;
}

Policy Catalog::rollback(std::string_view tenant, const Address& to, std::string_view actor) {
  SPINDLE_CHECK(!to.latest(), invalid_argument,
                "rollback needs an explicit revision: {} names the current head", to.str());
  detail::WriteTxn txn(impl_->db);
  const PolicyRow p = impl_->require_policy(tenant, to);
  const RevisionRow rev = impl_->resolve_revision(p, to);
  impl_->require_unexpired(p, rev, to);  // the head must be servable
  if (p.policy.head != rev.revision.id) {
    impl_->db.query("UPDATE policies SET head_seq = ?1, updated_ms = ?2 WHERE id = ?3")
        .bind(1, rev.seq)
        .bind(2, impl_->now())
        .bind(3, p.id)
        .run();
    impl_->audit(p.tenant_id, actor, "rollback", p.policy.address(),
                 json{{"from", p.policy.head.value_or("")}, {"to", rev.revision.id}}.dump());
    txn.commit();
  }
  return impl_->policy_by_id(p.id).policy;
}

Policy Catalog::tag(std::string_view tenant, std::string_view policy, std::string_view tag,
                    std::string_view actor) {
  check_tag(tag);
  detail::WriteTxn txn(impl_->db);
  const PolicyRow p = impl_->require_policy(tenant, policy);
  if (std::find(p.policy.tags.begin(), p.policy.tags.end(), tag) == p.policy.tags.end()) {
    SPINDLE_CHECK(p.policy.tags.size() < 64, invalid_argument,
                  "policy {} already has 64 tags, the most allowed", p.policy.address());
    impl_->db
        .query("INSERT INTO policy_tags(policy_id, tenant_id, tag, name) VALUES (?1, ?2, ?3, ?4)")
        .bind(1, p.id)
        .bind(2, p.tenant_id)
        .bind(3, tag)
        .bind(4, p.policy.name)
        .run();
    impl_->db.query("UPDATE policies SET updated_ms = ?1 WHERE id = ?2")
        .bind(1, impl_->now())
        .bind(2, p.id)
        .run();
    impl_->audit(p.tenant_id, actor, "tag", p.policy.address(), json{{"tag", tag}}.dump());
    txn.commit();
  }
  return impl_->policy_by_id(p.id).policy;
}

Policy Catalog::untag(std::string_view tenant, std::string_view policy, std::string_view tag,
                      std::string_view actor) {
  check_tag(tag);
  detail::WriteTxn txn(impl_->db);
  const PolicyRow p = impl_->require_policy(tenant, policy);
  impl_->db.query("DELETE FROM policy_tags WHERE policy_id = ?1 AND tag = ?2")
      .bind(1, p.id)
      .bind(2, tag)
      .run();
  SPINDLE_CHECK(impl_->db.changes() == 1, not_found, "policy {} has no tag '{}'",
                p.policy.address(), tag);
  impl_->db.query("UPDATE policies SET updated_ms = ?1 WHERE id = ?2")
      .bind(1, impl_->now())
      .bind(2, p.id)
      .run();
  impl_->audit(p.tenant_id, actor, "untag", p.policy.address(), json{{"tag", tag}}.dump());
  txn.commit();
  return impl_->policy_by_id(p.id).policy;
}

void Catalog::remove(std::string_view tenant, std::string_view policy, std::string_view actor) {
  detail::WriteTxn txn(impl_->db);
  const PolicyRow p = impl_->require_policy(tenant, policy);
  impl_->db.query("UPDATE policies SET deleted_ms = ?1 WHERE id = ?2")
      .bind(1, impl_->now())
      .bind(2, p.id)
      .run();
  impl_->audit(p.tenant_id, actor, "delete", p.policy.address(),
               json{{"head", p.policy.head.value_or("")}}.dump());
  txn.commit();
}

}  // namespace spindle::catalog
