// Committing and reading revisions. Commit order: blob durable -> one write transaction
// (re-check blob, insert revision, move head, audit) fsynced -> return (acknowledge).

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "catalog_impl.h"
#include "spindle/adapters/peft.h"
#include "spindle/adapters/sha256.h"
#include "spindle/core/error.h"

namespace spindle::catalog {
namespace {

using json = nlohmann::json;

// The revision must fit the policy's spec: same rank, alpha, rsLoRA; targets a subset.
void check_fits(const Policy& p, const engine::LoraWeights& w) {
  const std::string where = p.address();
  SPINDLE_CHECK(w.rank == p.lora.rank, invalid_argument,
                "revision for {} has LoRA rank {}, the policy's rank is {}", where, w.rank,
                p.lora.rank);
  SPINDLE_CHECK(std::memcmp(&w.alpha, &p.lora.alpha, sizeof(float)) == 0, invalid_argument,
                "revision for {} has lora_alpha {}, the policy's is {}", where, w.alpha,
                p.lora.alpha);
  SPINDLE_CHECK(w.use_rslora == p.lora.use_rslora, invalid_argument,
                "revision for {} has use_rslora={}, the policy's is {}", where, w.use_rslora,
                p.lora.use_rslora);
  for (engine::LoraTarget t : adapters::adapted_targets(w)) {
    SPINDLE_CHECK(
        std::find(p.lora.targets.begin(), p.lora.targets.end(), t) != p.lora.targets.end(),
        invalid_argument, "revision for {} adapts {}, which the policy does not target", where,
        engine::lora_target_name(t));
  }
}

}  // namespace

std::string revision_id(int64_t policy_id, const std::optional<std::string>& parent, int64_t step,
                        std::string_view blob, std::string_view metrics_json) {
  adapters::Sha256 h;
  h.update(fmt::format("spindle.revision.v1\npolicy={}\nparent={}\nstep={}\nblob={}\nmetrics=",
                       policy_id, parent.value_or("-"), step, blob));
  h.update(metrics_json);
  return h.finish_hex();
}

Revision Catalog::commit_revision(std::string_view tenant, std::string_view policy,
                                  const engine::LoraWeights& weights,
                                  const CommitOptions& options) {
  const std::string metrics = canonical_json_object(options.metrics_json, "revision metrics");
  SPINDLE_CHECK(!options.step || *options.step >= 0, invalid_argument,
                "revision step must be >= 0, got {}", *options.step);
  SPINDLE_CHECK(options.expires_ms == 0 || options.expires_ms > impl_->now(), invalid_argument,
                "revision expires_ms {} ({}) is not in the future (now {}); 0 makes it durable",
                options.expires_ms, utc_time(options.expires_ms), utc_time(impl_->now()));
  const PolicyRow before = impl_->require_policy(tenant, policy);
  SPINDLE_CHECK(!options.expected_base_id || *options.expected_base_id == before.policy.base_id,
                failed_precondition,
                "{} is on base '{}', not '{}', the base these weights were trained on (was the "
                "policy deleted and re-created meanwhile?)",
                before.policy.address(), before.policy.base_id,
                options.expected_base_id.value_or(""));
  check_fits(before.policy, weights);
  const BaseModel base = get_base(before.policy.base_id);

  // 1. The revision file, durable in the blob store (outside any transaction: slow I/O must
  //    not hold the catalog's write lock).
  //    Streamed from the weights (written and hashed side by side), never built in memory.
  const adapters::RevisionMeta meta = adapters::revision_meta_for(
      weights, {.base_model_id = base.id, .base_checksum = base.checksum, .dtype = options.dtype});
  const adapters::BlobProducer revision_bytes = [&](const adapters::BlobWrite& write) {
    adapters::stream_revision(weights, meta, write);
  };
  const adapters::BlobPut put = impl_->blobs.put_stream(revision_bytes, options.on_written);
  const std::string& blob = put.id;
  std::string state_bytes;
  std::optional<std::string> state_blob;
  if (options.optimizer_state) {
    state_bytes = options.optimizer_state->serialize();
    state_blob = impl_->blobs.put(state_bytes);
  }

  // 2. One transaction: everything is re-read under the write lock.
  detail::WriteTxn txn(impl_->db);
  const PolicyRow p = impl_->require_policy(tenant, policy);
  SPINDLE_CHECK(p.id == before.id, not_found, "policy {} was deleted during the commit",
                p.policy.address());
  if (options.expected_head) {
    SPINDLE_CHECK(p.policy.head.value_or("") == *options.expected_head, invalid_argument,
                  "commit to {} expected head '{}' but the head is '{}' (another writer "
                  "committed or rolled back first)",
                  p.policy.address(), *options.expected_head, p.policy.head.value_or(""));
  }
  int64_t step = options.step.value_or(0);
  if (!options.step && p.head_seq) step = impl_->revision_by_seq(*p.head_seq).revision.step + 1;
  // GC and collect_expired delete blobs only inside write transactions, so while we hold this
  // one the blob cannot disappear between this check and the insert. If an earlier GC removed
  // an orphan with these bytes after put() saw it, or collect_expired removed the blob of an
  // expired revision with the same content, write it again.
  if (!impl_->blobs.exists(blob)) impl_->blobs.put_stream(revision_bytes);
  if (state_blob && !impl_->blobs.exists(*state_blob)) impl_->blobs.put(state_bytes);
  // The state takes part in the id only when present, so weight-only ids stay as they were.
  const std::string id = revision_id(p.id, p.policy.head, step,
                                     state_blob ? blob + ":" + *state_blob : blob, metrics);
  int64_t seq = 0;
  const auto existing = impl_->find_revision(id);
  if (existing) {
    seq = existing->seq;  // the same commit again (same parent, step, content): idempotent
  } else {
    impl_->db
        .query(
            "INSERT INTO revisions(id, policy_id, parent_seq, step, blob, bytes, metrics, "
            "created_ms, state_blob) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")
        .bind(1, id)
        .bind(2, p.id)
        .bind(3, p.head_seq)
        .bind(4, step)
        .bind(5, blob)
        .bind(6, int64_t(put.bytes))
        .bind(7, metrics)
        .bind(8, impl_->now())
        .bind(9, state_blob)
        .run();
    seq = impl_->db.last_insert_rowid();
  }
  impl_->record_expiry(seq, /*is_new=*/!existing, options.expires_ms);
  impl_->db.query("UPDATE policies SET head_seq = ?1, updated_ms = ?2 WHERE id = ?3")
      .bind(1, seq)
      .bind(2, impl_->now())
      .bind(3, p.id)
      .run();
  json detail{{"parent", p.policy.head.value_or("")}, {"step", step}, {"blob", blob}};
  if (options.expires_ms != 0) detail["expires_ms"] = options.expires_ms;
  impl_->audit(p.tenant_id, options.actor, "commit", fmt::format("{}@{}", p.policy.address(), id),
               detail.dump());
  RevisionRow row = impl_->revision_by_seq(seq);
  txn.commit();  // 3. acknowledged once this returns: the WAL is fsynced
  return std::move(row.revision);
}

// A blob read right after get(): collect_expired may have collected the revision in between
// (it deletes blobs in its own transaction). Then the caller hears "expired", not "blob
// missing": get() again says so. A blob failing its checksum, or missing while its revision is
// live, is data_loss naming `what`.
namespace {

// read(): a blob store read of `blob`; its errors mapped as Catalog::Impl::read_resolved_blob
// documents.
template <class Read>
auto read_resolved(std::string_view tenant, const Address& address, const std::string& blob,
                   Catalog& cat, const adapters::BlobStore& blobs, std::string_view what,
                   Read&& read) -> decltype(read()) {
  try {
    return read();  // verifies the checksum
  } catch (const Error& e) {
    if (e.code() == ErrorCode::data_loss) {
      throw Error(ErrorCode::data_loss, fmt::format("{}: {}", what, e.what()));
    }
    if (e.code() != ErrorCode::not_found) throw;
    cat.get(tenant, address);  // throws not_found "... expired at ..." when it was collected
    // Still live, its blob gone: lost bytes, not a missing name.
    throw Error(ErrorCode::data_loss,
                fmt::format("{}: blob {} is missing from the blob store ({}); restore it from a "
                            "backup or re-commit the revision",
                            what, blob, blobs.path_of(blob).string()));
  }
}

}  // namespace

std::string Catalog::Impl::read_resolved_blob(std::string_view tenant, const Address& address,
                                             const std::string& blob, Catalog& cat,
                                             std::string_view what) {
  return read_resolved(tenant, address, blob, cat, blobs, what, [&] { return blobs.get(blob); });
}

adapters::DecodedRevision Catalog::Impl::read_resolved_revision(
    std::string_view tenant, const Address& address, const std::string& blob, Catalog& cat,
    std::string_view what, const std::string& source) {
  return read_resolved(tenant, address, blob, cat, blobs, what,
                       [&] { return blobs.get_revision(blob, source); });
}

adapters::DecodedRevision Catalog::read_revision(std::string_view tenant, const Address& address) {
  const Resolved r = get(tenant, address);
  const std::string what = fmt::format("revision {}@{}", r.policy.address(), r.revision.id);
  return impl_->read_resolved_revision(
      tenant, address, r.revision.blob, *this, what,
      fmt::format("{}@{} (blob {})", r.policy.address(), r.revision.id, r.revision.blob));
}

std::optional<engine::AdamW> Catalog::read_optimizer_state(std::string_view tenant,
                                                          const Address& address) {
  const Resolved r = get(tenant, address);
  if (!r.revision.state_blob) return std::nullopt;
  std::string bytes = impl_->read_resolved_blob(
      tenant, address, *r.revision.state_blob, *this,
      fmt::format("optimizer state of revision {}@{}", r.policy.address(), r.revision.id));
  return engine::AdamW::deserialize(
      std::move(bytes), fmt::format("{}@{} optimizer state (blob {})", r.policy.address(),
                                    r.revision.id, *r.revision.state_blob));
}

}  // namespace spindle::catalog
