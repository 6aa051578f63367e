#pragma once
/// \file messages_catalog.h
/// Catalog messages. Part of the wire messages: include messages.h, which includes this file
/// and whose header comment states the framing, the encodings and the compatibility rule.

#include "spindle/protocol/messages.h"

namespace spindle::protocol {

// ---- catalog -------------------------------------------------------------------------------

struct PolicyInfo {
  bool operator==(const PolicyInfo&) const = default;
  std::string address;
  std::string tenant;
  std::string name;
  std::string base_id;
  int64_t rank = 0;
  float alpha = 0.0f;
  std::vector<std::string> targets;
  std::string head;  // "" before the first revision
  std::string forked_from;
  std::vector<std::string> tags;
  std::string description;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  /// Version 2: the user_metadata of the client that created it ("" or a JSON object).
  std::string user_metadata_json;
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(address), CEREAL_NVP(tenant), CEREAL_NVP(name), CEREAL_NVP(base_id),
       CEREAL_NVP(rank), CEREAL_NVP(alpha), CEREAL_NVP(targets), CEREAL_NVP(head),
       CEREAL_NVP(forked_from), CEREAL_NVP(tags), CEREAL_NVP(description),
       CEREAL_NVP(created_ms), CEREAL_NVP(updated_ms));
    if (version >= 2) ar(CEREAL_NVP(user_metadata_json));
  }
};

struct RevisionInfo {
  bool operator==(const RevisionInfo&) const = default;
  std::string id;
  std::string policy;
  std::string parent;  // "" for a first revision
  int64_t step = 0;
  std::string blob;
  int64_t bytes = 0;
  bool has_state = false;  // optimizer state saved with it
  std::string metrics_json;
  int64_t created_ms = 0;
  /// Version 2. expires_ms: an ephemeral revision's expiry (Unix ms), 0 = durable. expired:
  /// past expiry and collected: its weights are gone, the row stays for lineage, and
  /// addressing it is not_found.
  int64_t expires_ms = 0;
  bool expired = false;
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(id), CEREAL_NVP(policy), CEREAL_NVP(parent), CEREAL_NVP(step),
       CEREAL_NVP(blob), CEREAL_NVP(bytes), CEREAL_NVP(has_state), CEREAL_NVP(metrics_json),
       CEREAL_NVP(created_ms));
    if (version >= 2) ar(CEREAL_NVP(expires_ms), CEREAL_NVP(expired));
  }
};

struct CatalogListRequest {
  bool operator==(const CatalogListRequest&) const = default;
  std::string base_id;      // "" = any
  std::string tag;          // "" = any
  std::string name_prefix;
  uint32_t limit = 100;     // 1..1000
  std::string cursor;       // next_cursor of the previous page; "" = first page
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(base_id), CEREAL_NVP(tag), CEREAL_NVP(name_prefix), CEREAL_NVP(limit),
       CEREAL_NVP(cursor));
  }
};
struct CatalogSearchRequest {
  bool operator==(const CatalogSearchRequest&) const = default;
  std::string text;
  uint32_t limit = 20;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(text), CEREAL_NVP(limit)); }
};
struct PolicyListReply {
  bool operator==(const PolicyListReply&) const = default;
  std::vector<PolicyInfo> policies;
  std::string next_cursor;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(policies), CEREAL_NVP(next_cursor));
  }
};

/// op "catalog_show", "catalog_rollback", "catalog_delete".
struct AddressRequest {
  bool operator==(const AddressRequest&) const = default;
  std::string address;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(address)); }
};
struct PolicyReply {
  bool operator==(const PolicyReply&) const = default;
  PolicyInfo policy;
  RevisionInfo revision;            // the revision the address resolved to (id "" if none)
  std::vector<RevisionInfo> recent;  // newest first, at most 20
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(policy), CEREAL_NVP(revision), CEREAL_NVP(recent));
  }
};

struct LineageRequest {
  bool operator==(const LineageRequest&) const = default;
  std::string address;
  int32_t max_ancestors = 1000;
  int32_t max_descendants = 1000;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(address), CEREAL_NVP(max_ancestors), CEREAL_NVP(max_descendants));
  }
};
struct LineageEntryInfo {
  bool operator==(const LineageEntryInfo&) const = default;
  RevisionInfo revision;
  int32_t depth = 0;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(revision), CEREAL_NVP(depth)); }
};
struct LineageReply {
  bool operator==(const LineageReply&) const = default;
  RevisionInfo revision;
  std::vector<LineageEntryInfo> ancestors;
  std::vector<LineageEntryInfo> descendants;
  bool ancestors_truncated = false;
  bool descendants_truncated = false;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(revision), CEREAL_NVP(ancestors), CEREAL_NVP(descendants),
       CEREAL_NVP(ancestors_truncated), CEREAL_NVP(descendants_truncated));
  }
};

struct ForkRequest {
  bool operator==(const ForkRequest&) const = default;
  std::string address;  // the revision to fork at
  std::string name;     // the new policy's name
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(address), CEREAL_NVP(name)); }
};

struct TagRequest {
  bool operator==(const TagRequest&) const = default;
  std::string address;
  std::vector<std::string> add;
  std::vector<std::string> remove;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(address), CEREAL_NVP(add), CEREAL_NVP(remove));
  }
};

/// PEFT import: adapter_config.json as text, adapter_model.safetensors as a uint8 frame.
struct ImportPeftRequest {
  bool operator==(const ImportPeftRequest&) const = default;
  std::string name;     // new policy name
  std::string base_id;  // "" = the server's default base
  std::string adapter_config_json;
  TensorRef adapter_model;  // uint8 [bytes]
  std::string description;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(name), CEREAL_NVP(base_id), CEREAL_NVP(adapter_config_json),
       CEREAL_NVP(adapter_model), CEREAL_NVP(description));
  }
};
struct ExportPeftReply {
  bool operator==(const ExportPeftReply&) const = default;
  std::string revision_id;
  std::string adapter_config_json;
  TensorRef adapter_model;  // uint8 [bytes]
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(revision_id), CEREAL_NVP(adapter_config_json), CEREAL_NVP(adapter_model));
  }
};

}  // namespace spindle::protocol

CEREAL_CLASS_VERSION(spindle::protocol::PolicyInfo, 2);
CEREAL_CLASS_VERSION(spindle::protocol::RevisionInfo, 2);
CEREAL_CLASS_VERSION(spindle::protocol::CatalogListRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::CatalogSearchRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::PolicyListReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::AddressRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::PolicyReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::LineageRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::LineageEntryInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::LineageReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ForkRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::TagRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ImportPeftRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ExportPeftReply, 1);
