#pragma once
// Plain values the catalog returns and takes. Times are milliseconds since the Unix epoch
// (UTC). Revision and blob ids are 64 lowercase hex digits (SHA-256).

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "spindle/adapters/blob_store.h"
#include "spindle/core/dtype.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/optimizer.h"

namespace spindle::catalog {

// A policy's adapter shape; every revision of the policy must match it (targets: a subset).
struct LoraSpec {
  int64_t rank = 0;
  float alpha = 0.0f;
  std::vector<engine::LoraTarget> targets;  // stored in kAllLoraTargets order
  bool use_rslora = false;
};

// A resident base model. Global (not per tenant): operators register bases, tenants use them.
struct BaseModel {
  std::string id;        // e.g. "qwen3-0.6b", "Qwen/Qwen3-0.6B" (check_base_id)
  std::string arch;      // "llama", "qwen3", ... ("unknown" when imported without one)
  std::string path;      // where the weights live on the serving hosts ("" if unknown)
  std::string checksum;  // recorded in every revision file; "" if unknown
  int64_t created_ms = 0;
};

struct PolicySpec {
  std::string name;
  std::string base_id;
  LoraSpec lora;
  std::string description;        // at most 4096 bytes
  std::vector<std::string> tags;  // at most 64
  std::string user_metadata_json;  // "" or a JSON object of at most 16384 bytes (stored as is)
};

struct Policy {
  std::string tenant;
  std::string name;
  std::string base_id;
  LoraSpec lora;
  std::optional<std::string> head;         // nullopt until the first commit
  std::optional<std::string> forked_from;  // the revision this policy was forked at
  std::vector<std::string> tags;           // sorted
  std::string description;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;  // last commit, rollback, tag change
  std::string user_metadata_json;  // PolicySpec's ("" = none); a fork copies its source's

  std::string address() const;  // "spindle://<tenant>/<name>"
};

// Immutable once written.
struct Revision {
  std::string id;
  std::string policy;  // name of the policy that committed it (same tenant as the reader)
  bool policy_deleted = false;
  std::optional<std::string> parent;
  int64_t step = 0;
  std::string blob;   // blob store id of the revision file
  int64_t bytes = 0;  // its size
  std::string metrics_json = "{}";
  int64_t created_ms = 0;
  std::optional<std::string> state_blob;  // optimizer state (AdamW) blob, if it was saved
  // Ephemeral revisions (CommitOptions::expires_ms): expires_ms 0 = durable. `expired`: past
  // expiry and collected by collect_expired (blobs released; the row stays for lineage).
  int64_t expires_ms = 0;
  bool expired = false;
};

// What an address resolves to.
struct Resolved {
  Policy policy;
  Revision revision;
};

enum class PolicySort : uint8_t {
  name,     // ascending
  updated,  // most recently updated first
};

// Index-served (O(log n) per page): no filter, name_prefix, base_id, and tag with name sort.
// Other combinations page correctly but filter rows as they scan.
struct ListQuery {
  std::optional<std::string> base_id;
  std::optional<std::string> tag;
  std::string name_prefix;
  std::optional<int64_t> created_from_ms;    // inclusive
  std::optional<int64_t> created_before_ms;  // exclusive
  PolicySort sort = PolicySort::name;
  int limit = 100;     // 1..1000
  std::string cursor;  // PolicyPage::next_cursor of the previous page; "" = first page
};

struct PolicyPage {
  std::vector<Policy> items;
  std::string next_cursor;  // "" when this is the last page
};

struct LineageOptions {
  int max_ancestors = 1000;    // nearest first
  int max_descendants = 1000;  // breadth-first
  int max_depth = 1000;        // descendants deeper than this are not followed
};

struct LineageEntry {
  Revision revision;
  int depth = 0;  // distance from the revision asked about (1 = parent or child)
};

struct Lineage {
  Revision revision;
  std::vector<LineageEntry> ancestors;    // nearest first
  std::vector<LineageEntry> descendants;  // by depth, then creation time
  bool ancestors_truncated = false;
  bool descendants_truncated = false;
};

struct CommitOptions {
  std::string actor;
  std::optional<int64_t> step;      // default: parent's step + 1, or 0 for the first revision
  std::string metrics_json = "{}";  // a JSON object; stored canonicalised
  // Compare-and-swap: when set, the commit fails (invalid_argument) unless the head is this
  // revision id ("" = the policy has no revision yet).
  std::optional<std::string> expected_head;
  // When set, the commit fails (failed_precondition) unless the policy is on this base: a
  // training session's save, whose policy may have been deleted and re-created on another base
  // while the session was open (its weights fit only the base they were trained on).
  std::optional<std::string> expected_base_id;
  DType dtype = DType::f32;  // tensor dtype in the revision file: f32, f16 or bf16
  // Optimizer state saved with the revision as its own blob (save_state); null: weights only.
  const engine::AdamW* optimizer_state = nullptr;
  // 0 = durable. Else an ephemeral revision (Tinker's ttl_seconds): Unix ms after which
  // collect_expired may collect it; it must be in the future. Servable and addressable like
  // any revision until collected; promote_revision makes it durable.
  int64_t expires_ms = 0;
  // Called once (on the committing thread, must not throw) when the revision file's bytes are
  // handed to the writer, before they are all in the file, durable, and the row committed (the
  // commit may still fail after it): BlobStore::put_stream's on_written.
  std::function<void()> on_written;
};

// One revision collect_expired collected.
struct ExpiredRevision {
  std::string tenant;
  std::string policy;
  std::string revision_id;
  std::string blob;  // its weights blob (deleted when no live revision shares it)
};

struct ExpiryReport {
  std::vector<ExpiredRevision> expired;  // collected now
  int64_t blobs_deleted = 0;
  int64_t bytes_freed = 0;
};

// One policy with one revision whose revision file is already in the blob store.
struct BulkEntry {
  PolicySpec spec;
  std::string blob_id;
  int64_t step = 0;
  std::string metrics_json = "{}";
};

struct GcOptions {
  std::string actor;
  // Soft-deleted policies older than this are purged with their revisions, except revisions
  // a live policy still descends from (those wait, and their policy stays a tombstone).
  std::chrono::milliseconds retention = std::chrono::hours(24 * 7);
  // Blob files younger than this are never deleted (BlobStore::gc protocol).
  std::chrono::seconds blob_grace = std::chrono::hours(1);
};

struct GcReport {
  int64_t policies_purged = 0;
  int64_t revisions_purged = 0;
  int64_t policies_waiting = 0;  // deleted, past retention, kept for a live descendant
  adapters::BlobGcReport blobs;
};

struct AuditEntry {
  int64_t id = 0;
  int64_t at_ms = 0;
  std::string actor;
  std::string action;  // create_tenant, create_policy, commit, fork, rollback, tag, untag, ...
  std::string target;  // an address, a base model id, ...
  std::string detail_json;
};

struct CheckOptions {
  // Read every live blob and verify its SHA-256 (cost: one read of each distinct blob). false:
  // only check that each is present.
  bool verify_blobs = true;
};

// A stored blob that a live revision needs and whose bytes no longer hash to its name.
struct CorruptBlob {
  std::string blob;
  std::string path;                    // its file in the blob store
  std::vector<std::string> revisions;  // "spindle://t/p@<id>" (+ " (optimizer state)")
  std::string detail;                  // the blob store's data_loss message
};

struct CheckReport {
  std::string integrity;                   // PRAGMA integrity_check: "ok" when sound
  std::vector<std::string> foreign_keys;   // PRAGMA foreign_key_check violations
  int64_t revisions = 0;                   // rows checked
  std::vector<std::string> missing_blobs;  // blobs a revision names that are not stored
  int64_t blobs_verified = 0;              // distinct blobs read and re-hashed
  std::vector<CorruptBlob> corrupt_blobs;  // blobs failing their checksum
  bool ok() const {
    return integrity == "ok" && foreign_keys.empty() && missing_blobs.empty() &&
           corrupt_blobs.empty();
  }
};

}  // namespace spindle::catalog
