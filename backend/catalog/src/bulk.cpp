// bulk_register: many policies with one revision each, one transaction, cached statements.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "catalog_impl.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/core/error.h"

namespace spindle::catalog {

size_t Catalog::bulk_register(std::string_view tenant, std::span<const BulkEntry> entries,
                              std::string_view actor) {
  check_name("tenant", tenant);
  // Validate everything before taking the write lock: specs, names unique in the batch, and
  // each distinct blob read once (checksum verified) and checked against its entries.
  std::set<std::string_view> names;
  std::map<std::string, adapters::RevisionMeta> blob_meta;
  std::map<std::string, BaseModel> bases;
  std::vector<std::string> metrics(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const BulkEntry& e = entries[i];
    check_spec(e.spec);
    SPINDLE_CHECK(names.insert(e.spec.name).second, invalid_argument,
                  "bulk_register: policy name '{}' appears twice in the batch", e.spec.name);
    SPINDLE_CHECK(e.step >= 0, invalid_argument, "bulk_register: {}: step must be >= 0",
                  e.spec.name);
    metrics[i] = canonical_json_object(e.metrics_json, "revision metrics");
    if (!bases.contains(e.spec.base_id)) bases.emplace(e.spec.base_id, get_base(e.spec.base_id));
    auto it = blob_meta.find(e.blob_id);
    if (it == blob_meta.end()) {
      const std::string bytes = impl_->blobs.get(e.blob_id);
      it = blob_meta.emplace(e.blob_id, adapters::decode_revision_meta(bytes, "blob " + e.blob_id))
               .first;
    }
    const adapters::RevisionMeta& m = it->second;
    const BaseModel& base = bases.at(e.spec.base_id);
    const LoraSpec& s = e.spec.lora;
    const bool targets_ok = std::all_of(m.targets.begin(), m.targets.end(), [&](auto t) {
      return std::find(s.targets.begin(), s.targets.end(), t) != s.targets.end();
    });
    SPINDLE_CHECK(m.rank == s.rank && std::memcmp(&m.alpha, &s.alpha, sizeof(float)) == 0 &&
                      m.use_rslora == s.use_rslora && targets_ok,
                  invalid_argument,
                  "bulk_register: {}: blob {} (rank {}, alpha {}, rslora {}) does not fit the "
                  "policy's LoRA spec (rank {}, alpha {}, rslora {}, targets {})",
                  e.spec.name, e.blob_id, m.rank, m.alpha, m.use_rslora, s.rank, s.alpha,
                  s.use_rslora, targets_to_csv(s.targets));
    SPINDLE_CHECK(m.base_model_id == base.id && m.base_checksum == base.checksum, invalid_argument,
                  "bulk_register: {}: blob {} was made for base '{}', not '{}'", e.spec.name,
                  e.blob_id, m.base_model_id, base.id);
  }

  detail::WriteTxn txn(impl_->db);
  const int64_t tid = impl_->ensure_tenant(tenant, actor);
  const int64_t now = impl_->now();
  // Under the write lock GC cannot delete a blob, so present now means present at commit.
  std::map<std::string, int64_t> sizes;
  for (const auto& [blob, meta] : blob_meta) {
    const auto size = impl_->blobs.size_of(blob);
    SPINDLE_CHECK(size.has_value(), not_found, "bulk_register: blob {} vanished from the store",
                  blob);
    sizes[blob] = int64_t(*size);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const BulkEntry& e = entries[i];
    const std::string address = fmt::format("spindle://{}/{}", tenant, e.spec.name);
    {
      auto q = impl_->db.query(
          "SELECT 1 FROM policies WHERE tenant_id = ?1 AND name = ?2 AND deleted_ms IS NULL");
      q.bind(1, tid).bind(2, e.spec.name);
      SPINDLE_CHECK(!q.step(), already_exists, "bulk_register: policy {} already exists",
                    address);
    }
    const int64_t id = insert_policy(*impl_, tid, e.spec, std::nullopt, std::nullopt);
    const std::string rev = revision_id(id, std::nullopt, e.step, e.blob_id, metrics[i]);
    impl_->db
        .query(
            "INSERT INTO revisions(id, policy_id, parent_seq, step, blob, bytes, metrics, "
            "created_ms) VALUES (?1, ?2, NULL, ?3, ?4, ?5, ?6, ?7)")
        .bind(1, rev)
        .bind(2, id)
        .bind(3, e.step)
        .bind(4, e.blob_id)
        .bind(5, sizes.at(e.blob_id))
        .bind(6, metrics[i])
        .bind(7, now)
        .run();
    impl_->db.query("UPDATE policies SET head_seq = ?1 WHERE id = ?2")
        .bind(1, impl_->db.last_insert_rowid())
        .bind(2, id)
        .run();
    impl_->audit(tid, actor, "create_policy+commit", fmt::format("{}@{}", address, rev),
                 nlohmann::json{{"base", e.spec.base_id}, {"blob", e.blob_id}}.dump());
  }
  txn.commit();
  return entries.size();
}

}  // namespace spindle::catalog
