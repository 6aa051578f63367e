#pragma once
// Internal state of a Catalog and the helpers its operation files share (rows <-> structs,
// tenant/policy/revision resolution, audit). Every resolver takes the tenant; a policy of
// another tenant and a missing policy raise the same not_found message.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "spindle/adapters/blob_store.h"
#include "spindle/catalog/catalog.h"
#include "sqlite_db.h"

namespace spindle::catalog {

// Internal keys beside the public structs: policy ids and revision seqs never leave the
// catalog (clients name revisions by their content hash).
struct PolicyRow {
  int64_t id = 0;
  int64_t tenant_id = 0;
  std::optional<int64_t> head_seq;
  std::optional<int64_t> forked_seq;
  Policy policy;
};

struct RevisionRow {
  int64_t seq = 0;
  std::optional<int64_t> parent_seq;
  int64_t policy_id = 0;
  int64_t tenant_id = 0;
  Revision revision;
};

struct Catalog::Impl {
  Impl(const std::filesystem::path& dir, const CatalogOptions& options);

  std::filesystem::path data_dir;
  detail::Db db;
  adapters::BlobStore blobs;
  std::function<int64_t()> clock;

  int64_t now() const { return clock(); }

  // ---- tenants --------------------------------------------------------------------------
  std::optional<int64_t> find_tenant(std::string_view tenant);
  // Inside a write transaction: the tenant's id, creating (and auditing) it if new.
  int64_t ensure_tenant(std::string_view tenant, std::string_view actor);

  // ---- policies -------------------------------------------------------------------------
  // The live policy `name` of `tenant`, or not_found "policy spindle://t/name not found".
  PolicyRow require_policy(std::string_view tenant, std::string_view name);
  std::optional<PolicyRow> find_policy(int64_t tenant_id, std::string_view tenant,
                                       std::string_view name);
  PolicyRow policy_by_id(int64_t id);
  // Resolves the tenant in the address against the caller's tenant (mismatch = not found).
  PolicyRow require_policy(std::string_view tenant, const Address& address);

  // ---- revisions ------------------------------------------------------------------------
  std::optional<RevisionRow> find_revision(std::string_view id);
  RevisionRow revision_by_seq(int64_t seq);
  // The revision an address names, checked to be in the policy's history: one of its own
  // commits, or an ancestor-or-self of the revision it was forked at. not_found otherwise.
  RevisionRow resolve_revision(const PolicyRow& policy, const Address& address);
  bool in_history(const PolicyRow& policy, const RevisionRow& revision);
  // not_found "revision <id> of spindle://t/p expired at <UTC> (ephemeral; ...)" when
  // collect_expired collected it (`address` tells a head from an explicit revision).
  void require_unexpired(const PolicyRow& policy, const RevisionRow& revision,
                         const Address& address);

  // ---- expiry (expiry.cpp) ----------------------------------------------------------------
  // Inside the commit's write transaction: the expiry of revision `seq` after a commit with
  // CommitOptions::expires_ms = `expires_ms` (0 = durable). A new revision gets a row when
  // ephemeral. An existing one (the same commit again) keeps the most durable outcome:
  // durable stays durable, a durable re-commit promotes it, two ephemeral ones keep the later
  // expiry, and a collected one is revived (its blobs were re-written by the commit).
  void record_expiry(int64_t seq, bool is_new, int64_t expires_ms);
  // Whether a live revision (durable, or ephemeral and not collected) names `blob` as its
  // weights or its optimizer state. Index lookups only (revisions_by_blob, _by_state_blob).
  bool blob_referenced_live(std::string_view blob);
  // blobs.get(blob) of a revision get(tenant, address) just resolved; when the blob is gone
  // because collect_expired collected the revision meanwhile, the "expired" not_found. A blob
  // failing its checksum throws data_loss "<what>: blob <id> is corrupt: <path> ...", where
  // `what` names the revision ("revision spindle://t/p@<id>"); so does one missing while the
  // revision is live.
  std::string read_resolved_blob(std::string_view tenant, const Address& address,
                                 const std::string& blob, Catalog& cat, std::string_view what);
  // The same for a revision's weights blob, decoded as it is read (BlobStore::get_revision:
  // each tensor straight into its memory); decode errors name `source`.
  adapters::DecodedRevision read_resolved_revision(std::string_view tenant, const Address& address,
                                                   const std::string& blob, Catalog& cat,
                                                   std::string_view what,
                                                   const std::string& source);
  // The live (durable, or ephemeral and not collected) revisions naming `blob` as weights or
  // optimizer state, as "spindle://t/p@<id>" (+ " (optimizer state)"), oldest first.
  std::vector<std::string> live_revisions_naming(std::string_view blob);

  // ---- audit ----------------------------------------------------------------------------
  void audit(std::optional<int64_t> tenant_id, std::string_view actor, std::string_view action,
             std::string_view target, const std::string& detail_json);
};

// Column list + FROM clause shared by policy queries; policy_row reads it from column 0.
extern const char* const kPolicySelect;
// Just the column list (for queries with their own FROM clause; aliases p and t required).
extern const char* const kPolicyColumnsSql;
PolicyRow policy_row(const detail::Query& q);
constexpr int kPolicyColumns = 18;

// Column list + FROM clause shared by revision queries; revision_from_row reads it.
extern const char* const kRevisionSelect;
// The same split in two, to add columns: kRevisionColumnsSql + ", x " + kRevisionFromSql.
extern const char* const kRevisionColumnsSql;
extern const char* const kRevisionFromSql;
RevisionRow revision_from_row(const detail::Query& q, int first_col = 0);
constexpr int kRevisionColumns = 16;

std::string targets_to_csv(const std::vector<engine::LoraTarget>& targets);
std::vector<engine::LoraTarget> targets_from_csv(const std::string& csv);
// invalid_argument naming the problem: rank range, alpha, targets empty or repeated.
void check_lora_spec(const LoraSpec& spec);
void check_spec(const PolicySpec& spec);
inline constexpr size_t kMaxUserMetadataBytes = 16384;
// "" or a JSON object of at most kMaxUserMetadataBytes; invalid_argument naming the field.
void check_user_metadata(std::string_view text);
// The JSON object `text` re-serialised canonically (sorted keys, no spaces).
std::string canonical_json_object(std::string_view text, std::string_view what);

// "2024-06-11 14:05:00 UTC" (ms since the Unix epoch).
std::string utc_time(int64_t ms);

[[noreturn]] void throw_policy_not_found(std::string_view tenant, std::string_view name);

}  // namespace spindle::catalog

namespace spindle::catalog {

// Inserts a live policy row (and its tags); returns its id. The caller holds the write
// transaction and has checked the spec, the tenant and that the name is free.
int64_t insert_policy(Catalog::Impl& impl, int64_t tenant_id, const PolicySpec& spec,
                      std::optional<int64_t> head_seq, std::optional<int64_t> forked_seq);

// The content hash naming a revision: SHA-256 over the policy's row id, the parent, the step,
// the blob and the canonical metrics. Including the parent makes ids a hash chain over the
// lineage; including the policy keeps two forks that commit equal bytes apart.
std::string revision_id(int64_t policy_id, const std::optional<std::string>& parent, int64_t step,
                        std::string_view blob, std::string_view metrics_json);

}  // namespace spindle::catalog
