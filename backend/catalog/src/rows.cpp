// Rows <-> structs, spec validation, and the tenant-scoped resolvers every operation uses.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "catalog_impl.h"
#include "spindle/core/error.h"

namespace spindle::catalog {

using engine::LoraTarget;

#define SPINDLE_POLICY_COLUMNS                                                       \
  "SELECT p.id, p.tenant_id, t.name, p.name, p.base_id, p.lora_rank, p.lora_alpha, " \
  "p.lora_targets, p.use_rslora, "                                                   \
  "(SELECT h.id FROM revisions h WHERE h.seq = p.head_seq), "                        \
  "(SELECT f.id FROM revisions f WHERE f.seq = p.forked_seq), p.description, "       \
  "p.created_ms, p.updated_ms, "                                                     \
  "(SELECT group_concat(g.tag, ',') FROM policy_tags g WHERE g.policy_id = p.id), "  \
  "p.head_seq, p.forked_seq, p.user_metadata "

const char* const kPolicyColumnsSql = SPINDLE_POLICY_COLUMNS;
const char* const kPolicySelect =
    SPINDLE_POLICY_COLUMNS "FROM policies p JOIN tenants t ON t.id = p.tenant_id ";

// The expiry columns are subqueries on revision_expiry's primary key (schema v5; a row only
// for ephemeral revisions), not a LEFT JOIN: an outer join would pin the join order and turn
// the lineage queries' "JOIN anc" into a scan of every revision.
#define SPINDLE_REVISION_COLUMNS                                                          \
  "SELECT r.id, r.policy_id, p.tenant_id, p.name, p.deleted_ms IS NOT NULL, "             \
  "(SELECT x.id FROM revisions x WHERE x.seq = r.parent_seq), "                           \
  "r.step, r.blob, r.bytes, r.metrics, r.created_ms, r.seq, r.parent_seq, r.state_blob, " \
  "(SELECT e.expires_ms FROM revision_expiry e WHERE e.seq = r.seq), "                    \
  "coalesce((SELECT e.expired_ms IS NOT NULL FROM revision_expiry e WHERE e.seq = r.seq), 0) "
#define SPINDLE_REVISION_FROM "FROM revisions r JOIN policies p ON p.id = r.policy_id "

const char* const kRevisionColumnsSql = SPINDLE_REVISION_COLUMNS;
const char* const kRevisionFromSql = SPINDLE_REVISION_FROM;
const char* const kRevisionSelect = SPINDLE_REVISION_COLUMNS SPINDLE_REVISION_FROM;

std::string Policy::address() const {
  return fmt::format("spindle://{}/{}", tenant, name);
}

std::string targets_to_csv(const std::vector<LoraTarget>& targets) {
  std::string s;
  for (LoraTarget t : engine::kAllLoraTargets) {
    if (std::find(targets.begin(), targets.end(), t) == targets.end()) continue;
    if (!s.empty()) s += ',';
    s += engine::lora_target_name(t);
  }
  return s;
}

std::vector<LoraTarget> targets_from_csv(const std::string& csv) {
  std::vector<LoraTarget> out;
  size_t start = 0;
  while (start < csv.size()) {
    const size_t comma = std::min(csv.find(',', start), csv.size());
    const auto t = engine::lora_target_from_name(csv.substr(start, comma - start));
    SPINDLE_CHECK(t.has_value(), format, "catalog: stored LoRA targets '{}' are corrupt", csv);
    out.push_back(*t);
    start = comma + 1;
  }
  return out;
}

PolicyRow policy_row(const detail::Query& q) {
  PolicyRow row;
  row.id = q.int64(0);
  row.tenant_id = q.int64(1);
  row.head_seq = q.opt_int64(15);
  row.forked_seq = q.opt_int64(16);
  Policy& p = row.policy;
  p.tenant = q.text(2);
  p.name = q.text(3);
  p.base_id = q.text(4);
  p.lora.rank = q.int64(5);
  p.lora.alpha = float(q.real(6));
  p.lora.targets = targets_from_csv(q.text(7));
  p.lora.use_rslora = q.int64(8) != 0;
  p.head = q.opt_text(9);
  p.forked_from = q.opt_text(10);
  p.description = q.text(11);
  p.created_ms = q.int64(12);
  p.updated_ms = q.int64(13);
  const std::string tags = q.text(14);
  for (size_t start = 0; start < tags.size();) {
    const size_t comma = std::min(tags.find(',', start), tags.size());
    p.tags.push_back(tags.substr(start, comma - start));
    start = comma + 1;
  }
  std::sort(p.tags.begin(), p.tags.end());
  p.user_metadata_json = q.text(17);
  return row;
}

RevisionRow revision_from_row(const detail::Query& q, int c) {
  RevisionRow row;
  Revision& r = row.revision;
  r.id = q.text(c + 0);
  row.policy_id = q.int64(c + 1);
  row.tenant_id = q.int64(c + 2);
  r.policy = q.text(c + 3);
  r.policy_deleted = q.int64(c + 4) != 0;
  r.parent = q.opt_text(c + 5);
  r.step = q.int64(c + 6);
  r.blob = q.text(c + 7);
  r.bytes = q.int64(c + 8);
  r.metrics_json = q.text(c + 9);
  r.created_ms = q.int64(c + 10);
  row.seq = q.int64(c + 11);
  row.parent_seq = q.opt_int64(c + 12);
  r.state_blob = q.opt_text(c + 13);
  r.expires_ms = q.opt_int64(c + 14).value_or(0);
  r.expired = q.int64(c + 15) != 0;
  return row;
}

void check_lora_spec(const LoraSpec& s) {
  SPINDLE_CHECK(s.rank >= 1 && s.rank <= 65536, invalid_argument,
                "LoRA rank must be in 1..65536, got {}", s.rank);
  SPINDLE_CHECK(std::isfinite(s.alpha) && s.alpha > 0, invalid_argument,
                "LoRA alpha must be a positive finite number, got {}", s.alpha);
  SPINDLE_CHECK(!s.targets.empty(), invalid_argument, "LoRA targets are empty");
  for (size_t i = 0; i < s.targets.size(); ++i) {
    for (size_t j = i + 1; j < s.targets.size(); ++j) {
      SPINDLE_CHECK(s.targets[i] != s.targets[j], invalid_argument,
                    "LoRA target {} is listed twice", engine::lora_target_name(s.targets[i]));
    }
  }
}

void check_spec(const PolicySpec& spec) {
  check_name("policy name", spec.name);
  check_base_id(spec.base_id);
  check_lora_spec(spec.lora);
  check_user_metadata(spec.user_metadata_json);
  SPINDLE_CHECK(spec.description.size() <= 4096, invalid_argument,
                "policy description has {} bytes, at most 4096 allowed", spec.description.size());
  SPINDLE_CHECK(spec.tags.size() <= 64, invalid_argument, "a policy has at most 64 tags, got {}",
                spec.tags.size());
  for (const auto& t : spec.tags) check_tag(t);
}

void check_user_metadata(std::string_view text) {
  if (text.empty()) return;
  SPINDLE_CHECK(text.size() <= kMaxUserMetadataBytes, invalid_argument,
                "policy user_metadata_json has {} bytes, at most {} allowed", text.size(),
                kMaxUserMetadataBytes);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    SPINDLE_THROW(invalid_argument, "policy user_metadata_json is not valid JSON: {}", e.what());
  }
  SPINDLE_CHECK(j.is_object(), invalid_argument,
                "policy user_metadata_json must be a JSON object (or empty), got {}",
                j.type_name());
}

std::string canonical_json_object(std::string_view text, std::string_view what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.empty() ? std::string_view("{}") : text);
  } catch (const nlohmann::json::exception& e) {
    SPINDLE_THROW(invalid_argument, "{} is not valid JSON: {}", what, e.what());
  }
  SPINDLE_CHECK(j.is_object(), invalid_argument, "{} must be a JSON object", what);
  return j.dump();
}

std::string utc_time(int64_t ms) {
  const std::time_t t = std::time_t(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

void throw_policy_not_found(std::string_view tenant, std::string_view name) {
  SPINDLE_THROW(not_found, "policy spindle://{}/{} not found", tenant, name);
}

// ---- resolvers ----------------------------------------------------------------------------

std::optional<int64_t> Catalog::Impl::find_tenant(std::string_view tenant) {
  auto q = db.query("SELECT id FROM tenants WHERE name = ?1");
  q.bind(1, tenant);
  if (!q.step()) return std::nullopt;
  return q.int64(0);
}

int64_t Catalog::Impl::ensure_tenant(std::string_view tenant, std::string_view actor) {
  check_name("tenant", tenant);
  if (const auto id = find_tenant(tenant)) return *id;
  db.query("INSERT INTO tenants(name, created_ms) VALUES (?1, ?2)")
      .bind(1, tenant)
      .bind(2, now())
      .run();
  const int64_t id = db.last_insert_rowid();
  audit(id, actor, "create_tenant", tenant, "{}");
  return id;
}

std::optional<PolicyRow> Catalog::Impl::find_policy(int64_t tenant_id, std::string_view tenant,
                                                    std::string_view name) {
  auto q = db.query(std::string(kPolicySelect) +
                    "WHERE p.tenant_id = ?1 AND p.name = ?2 AND p.deleted_ms IS NULL");
  q.bind(1, tenant_id).bind(2, name);
  if (!q.step()) return std::nullopt;
  PolicyRow row = policy_row(q);
  SPINDLE_ASSERT(row.policy.tenant == tenant);
  return row;
}

PolicyRow Catalog::Impl::require_policy(std::string_view tenant, std::string_view name) {
  check_name("tenant", tenant);
  check_name("policy name", name);
  const auto tid = find_tenant(tenant);
  if (!tid) throw_policy_not_found(tenant, name);
  auto row = find_policy(*tid, tenant, name);
  if (!row) throw_policy_not_found(tenant, name);
  return std::move(*row);
}

PolicyRow Catalog::Impl::require_policy(std::string_view tenant, const Address& address) {
  // Another tenant's address is answered exactly as a missing policy would be.
  if (address.tenant != tenant) throw_policy_not_found(address.tenant, address.policy);
  return require_policy(tenant, address.policy);
}

PolicyRow Catalog::Impl::policy_by_id(int64_t id) {
  auto q = db.query(std::string(kPolicySelect) + "WHERE p.id = ?1");
  q.bind(1, id);
  SPINDLE_CHECK(q.step(), internal, "catalog: policy row {} vanished", id);
  return policy_row(q);
}

RevisionRow Catalog::Impl::revision_by_seq(int64_t seq) {
  auto q = db.query(std::string(kRevisionSelect) + "WHERE r.seq = ?1");
  q.bind(1, seq);
  SPINDLE_CHECK(q.step(), internal, "catalog: revision row {} vanished", seq);
  return revision_from_row(q);
}

std::optional<RevisionRow> Catalog::Impl::find_revision(std::string_view id) {
  auto q = db.query(std::string(kRevisionSelect) + "WHERE r.id = ?1");
  q.bind(1, id);
  if (!q.step()) return std::nullopt;
  return revision_from_row(q);
}

bool Catalog::Impl::in_history(const PolicyRow& policy, const RevisionRow& rev) {
  if (rev.tenant_id != policy.tenant_id) return false;
  if (rev.policy_id == policy.id) return true;
  if (!policy.forked_seq) return false;
  auto q = db.query(
      "WITH RECURSIVE anc(seq) AS ("
      "  SELECT ?1 UNION ALL"
      "  SELECT r.parent_seq FROM revisions r JOIN anc ON r.seq = anc.seq"
      "  WHERE r.parent_seq IS NOT NULL)"
      "SELECT 1 FROM anc WHERE seq = ?2 LIMIT 1");
  q.bind(1, *policy.forked_seq).bind(2, rev.seq);
  return q.step();
}

RevisionRow Catalog::Impl::resolve_revision(const PolicyRow& policy, const Address& address) {
  const std::string where = policy.policy.address();
  if (address.latest()) {
    SPINDLE_CHECK(policy.head_seq.has_value(), not_found, "policy {} has no revisions yet", where);
    return revision_by_seq(*policy.head_seq);
  }
  std::vector<RevisionRow> matches;
  {
    // A full id or a prefix: ids are 64 hex digits, all sorting below prefix + '~'.
    auto q = db.query(std::string(kRevisionSelect) + "WHERE r.id >= ?1 AND r.id < ?2 LIMIT 64");
    q.bind(1, address.revision).bind(2, address.revision + "~");
    while (q.step()) matches.push_back(revision_from_row(q));
  }
  std::erase_if(matches, [&](const RevisionRow& r) { return !in_history(policy, r); });
  SPINDLE_CHECK(!matches.empty(), not_found, "revision {} not found in {}", address.revision,
                where);
  SPINDLE_CHECK(matches.size() == 1, invalid_argument,
                "revision prefix {} is ambiguous in {}: it matches {} and {}; give more digits",
                address.revision, where, matches[0].revision.id, matches[1].revision.id);
  return std::move(matches[0]);
}

void Catalog::Impl::require_unexpired(const PolicyRow& policy, const RevisionRow& rev,
                                      const Address& address) {
  if (!rev.revision.expired) return;
  const std::string owner = fmt::format("spindle://{}/{}", policy.policy.tenant, rev.revision.policy);
  if (address.latest()) {
    SPINDLE_THROW(not_found,
                  "the head of {}, revision {} of {}, expired at {} (ephemeral; promote it "
                  "before expiry to keep it, or roll back to a durable revision)",
                  policy.policy.address(), rev.revision.id, owner,
                  utc_time(rev.revision.expires_ms));
  }
  SPINDLE_THROW(not_found,
                "revision {} of {} expired at {} (ephemeral; promote it before expiry to keep it)",
                rev.revision.id, owner, utc_time(rev.revision.expires_ms));
}

void Catalog::Impl::audit(std::optional<int64_t> tenant_id, std::string_view actor,
                          std::string_view action, std::string_view target,
                          const std::string& detail_json) {
  db.query(
        "INSERT INTO audit(at_ms, tenant_id, actor, action, target, detail) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
      .bind(1, now())
      .bind(2, tenant_id)
      .bind(3, actor.empty() ? std::string_view("unknown") : actor)
      .bind(4, action)
      .bind(5, target)
      .bind(6, detail_json)
      .run();
}

}  // namespace spindle::catalog
