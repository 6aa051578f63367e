#pragma once
/// \file messages_studio.h
/// Messages the Studio needs beyond the headless ops: reward plugin and dataset listings, the
/// streaming form of `sample`, and the tenant-scoped event subscription. Part of the wire
/// messages: include messages.h, which includes this file and whose header comment states the
/// framing, the encodings and the compatibility rule.
///
/// Streams. `sample_stream` and `subscribe` answer one request with several reply messages
/// carrying the request's id; every one but the last has `final == false`. An error reply ends
/// a stream too. `is_final_reply()` (wire.h) tells a reader when to forget the id.

#include "spindle/protocol/messages.h"

namespace spindle::protocol {

// ---- reward plugins and datasets -----------------------------------------------------------

/// One reward plugin the daemon's reward host can load.
struct RewardPluginInfo {
  bool operator==(const RewardPluginInfo&) const = default;
  std::string name;
  std::string description;
  std::string version;             // the plugin's own version ("" when it declares none)
  uint32_t abi_version = 0;
  std::string config_schema_json;  // JSON Schema (subset) of the term's config object
  std::string path;                // the shared object on the daemon's machine
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(name), CEREAL_NVP(description), CEREAL_NVP(version), CEREAL_NVP(abi_version),
       CEREAL_NVP(config_schema_json), CEREAL_NVP(path));
  }
};
/// op "reward_plugins" (Empty) and "plugin_rescan" (Empty): the plugins, sorted by name.
struct RewardPluginsReply {
  bool operator==(const RewardPluginsReply&) const = default;
  std::vector<RewardPluginInfo> plugins;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(plugins)); }
};

/// op "datasets": the daemon's prompt datasets (a GRPO run config's "dataset" names).
struct DatasetsRequest {
  bool operator==(const DatasetsRequest&) const = default;
  uint32_t examples = 3;  // example rows per dataset (0..20)
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(examples)); }
};
struct DatasetInfo {
  bool operator==(const DatasetInfo&) const = default;
  std::string name;         // "arith", "gsm8k", "countdown", ...
  std::string description;  // one line
  bool available = false;   // its files exist on the daemon's machine
  int64_t rows = 0;         // train rows (0 when unavailable)
  int64_t heldout_rows = 0;
  std::vector<RewardTestRow> examples;  // first train rows, as reward_test rows
  std::string error;        // why it is unavailable ("" when available)
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(name), CEREAL_NVP(description), CEREAL_NVP(available), CEREAL_NVP(rows),
       CEREAL_NVP(heldout_rows), CEREAL_NVP(examples), CEREAL_NVP(error));
  }
};
struct DatasetsReply {
  bool operator==(const DatasetsReply&) const = default;
  std::vector<DatasetInfo> datasets;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(datasets)); }
};

// ---- streaming sample ----------------------------------------------------------------------

/// New tokens of one sequence since the previous message of the stream.
///
/// `pieces[i]` is the text of `tokens[i]` as the base's tokenizer decodes that token on its own
/// after the token before it (the previous token of the sequence, or the prompt's last token
/// for the first one: llama2.c drops a piece's leading space after BOS, as its decode does).
/// A stop token's piece is "" (stop_token_ids; its text is never part of `text`), and every
/// piece is "" when the base has no tokenizer. Byte-level BPE pieces may split a multi-byte
/// character: the binary encoding carries the raw bytes (concatenating them rebuilds the
/// character), the JSON encoding shows U+FFFD per invalid byte. The final sequence's `text` is
/// the concatenation of its pieces, cut where a stop string starts.
struct SampleDeltaMsg {
  bool operator==(const SampleDeltaMsg&) const = default;
  uint32_t sequence = 0;            // index among the request's num_samples
  TensorRef tokens;                 // int32 [k], k >= 1
  TensorRef logprobs;               // float32 [k]
  std::vector<std::string> pieces;  // [k], see above
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(sequence), CEREAL_NVP(tokens), CEREAL_NVP(logprobs), CEREAL_NVP(pieces));
  }
};
/// op "sample_stream" (body SampleRequest): zero or more messages with `final` false and
/// `deltas` (at most one per sequence and message, in sequence order), then one with `final`
/// true whose `sequences` are exactly what `sample` returns for the same request (and whose
/// `deltas` are empty). Concatenating a sequence's deltas gives its final `tokens`/`logprobs`
/// (and its pieces the final `text`, up to a stop string).
struct SampleStreamReply {
  bool operator==(const SampleStreamReply&) const = default;
  bool final = false;
  std::string revision_id;
  std::vector<SampleDeltaMsg> deltas;
  std::vector<SequenceMsg> sequences;  // final message only
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(final), CEREAL_NVP(revision_id), CEREAL_NVP(deltas), CEREAL_NVP(sequences));
  }
};

// ---- events --------------------------------------------------------------------------------

/// op "subscribe": stream the caller's tenant's events on this connection. topics: any of
/// "metrics", "residency" (empty = both).
struct SubscribeRequest {
  bool operator==(const SubscribeRequest&) const = default;
  std::vector<std::string> topics;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(topics)); }
};
/// One message of a subscription. The first one has topic "subscribed" (the subscription is
/// live: no event after it is missed unless the connection drops messages). Then "metrics"
/// (`run` set, as the PUB socket's metrics event) and "residency" (`status` set, placements
/// restricted to the caller's revisions). The last one has `final` true and topic "closed"
/// (after `unsubscribe` or when the server stops).
struct EventReply {
  bool operator==(const EventReply&) const = default;
  bool final = false;
  std::string topic;
  RunStatusReply run;
  StatusReply status;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(final), CEREAL_NVP(topic), CEREAL_NVP(run), CEREAL_NVP(status));
  }
};
/// op "unsubscribe": ends the subscription whose `subscribe` request had id `subscription` on
/// the same connection (its final EventReply is sent first). Reply: Empty.
struct UnsubscribeRequest {
  bool operator==(const UnsubscribeRequest&) const = default;
  uint64_t subscription = 0;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(subscription)); }
};

}  // namespace spindle::protocol

CEREAL_CLASS_VERSION(spindle::protocol::RewardPluginInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RewardPluginsReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::DatasetsRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::DatasetInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::DatasetsReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SampleDeltaMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SampleStreamReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SubscribeRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::EventReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::UnsubscribeRequest, 1);
