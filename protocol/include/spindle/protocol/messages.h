#pragma once
/// \file messages.h
/// Spindle wire messages (DESIGN.md "Protocol"; every field documented in protocol/PROTOCOL.md).
///
/// A request is a multipart ZeroMQ message `[header][frame 0][frame 1]...` sent on a DEALER
/// socket. The header is one encoding byte (`B` = cereal portable binary, `J` = cereal JSON with
/// named fields) followed by the archive of, in this order:
///   protocol_version (u32), request_id (u64), token (string), op (string), body (op's struct).
/// A reply uses the request's encoding:
///   protocol_version, request_id, op, ok (bool), then `error` (ErrorInfo) when !ok or `body`
///   (the op's reply struct) when ok.
/// Tensors never travel inside the archive: a TensorRef names a frame and describes its dtype
/// and shape; the frame holds the raw little-endian values.
///
/// Every struct compares field by field (operator==; NaN compares unequal).
///
/// Compatibility: every struct carries CEREAL_CLASS_VERSION; a field added later bumps the
/// version and is read only when `version >=` the bump, so old peers keep working. In the JSON
/// encoding cereal expects "cereal_class_version" in the first object of each type; clients in
/// other languages simply send it in every object (extra members are ignored).

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace spindle::protocol {

/// Bumped on any change an older peer cannot read. A request with another version gets
/// `unsupported_version`.
inline constexpr uint32_t kProtocolVersion = 1;

// ---- shared pieces -------------------------------------------------------------------------

/// A tensor carried in frame `frame` (0 = the first frame after the header).
/// dtype: "int32" | "float32" | "uint8"; the frame size must equal prod(shape) * itemsize.
struct TensorRef {
  bool operator==(const TensorRef&) const = default;
  uint32_t frame = 0;
  std::string dtype;
  std::vector<int64_t> shape;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(frame), CEREAL_NVP(dtype), CEREAL_NVP(shape));
  }
};

/// One named scalar of a loss config (Tinker's loss_fn_config dict, as a list).
struct NamedValue {
  bool operator==(const NamedValue&) const = default;
  std::string name;
  double value = 0.0;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(name), CEREAL_NVP(value)); }
};

struct NamedTensor {
  bool operator==(const NamedTensor&) const = default;
  std::string name;
  TensorRef tensor;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(name), CEREAL_NVP(tensor)); }
};

/// Wire error codes (strings on the wire): see error_codes.h.
struct ErrorInfo {
  bool operator==(const ErrorInfo&) const = default;
  std::string code;
  std::string message;
  /// For `overloaded`: the server's queue when it refused; retry after retry_after_ms.
  uint64_t queue_depth = 0;
  uint64_t queue_limit = 0;
  uint32_t retry_after_ms = 0;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(code), CEREAL_NVP(message), CEREAL_NVP(queue_depth), CEREAL_NVP(queue_limit),
       CEREAL_NVP(retry_after_ms));
  }
};

struct Empty {
  bool operator==(const Empty&) const = default;
  template <class A> void serialize(A&, uint32_t) {}
};

// ---- session / server ----------------------------------------------------------------------

struct HandshakeRequest {
  bool operator==(const HandshakeRequest&) const = default;
  std::string client_name;  // free text, logged
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(client_name)); }
};
struct HandshakeReply {
  bool operator==(const HandshakeReply&) const = default;
  uint32_t protocol_version = kProtocolVersion;
  std::string server_version;
  std::string tenant;  // the tenant the token maps to
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(protocol_version), CEREAL_NVP(server_version), CEREAL_NVP(tenant));
  }
};

struct BaseInfo {
  bool operator==(const BaseInfo&) const = default;
  std::string id;
  std::string arch;
  int64_t n_layers = 0;
  int64_t dim = 0;
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  int32_t bos_token = -1;
  int32_t eos_token = -1;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(id), CEREAL_NVP(arch), CEREAL_NVP(n_layers), CEREAL_NVP(dim),
       CEREAL_NVP(vocab_size), CEREAL_NVP(max_seq_len), CEREAL_NVP(bos_token),
       CEREAL_NVP(eos_token));
  }
};

/// Limits the server enforces before anything reaches the engine.
struct LimitsInfo {
  bool operator==(const LimitsInfo&) const = default;
  uint64_t max_frame_bytes = 0;
  uint32_t max_frames = 0;
  uint32_t max_batch = 0;            // data per forward/forward_backward
  uint32_t max_tokens_per_request = 0;
  uint32_t max_num_samples = 0;
  uint32_t max_sample_tokens = 0;    // sampling_params.max_tokens
  uint32_t max_rank = 0;
  uint32_t max_queue = 0;            // queued requests before `overloaded`
  uint32_t max_sessions = 0;         // training sessions at once
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(max_frame_bytes), CEREAL_NVP(max_frames), CEREAL_NVP(max_batch),
       CEREAL_NVP(max_tokens_per_request), CEREAL_NVP(max_num_samples),
       CEREAL_NVP(max_sample_tokens), CEREAL_NVP(max_rank), CEREAL_NVP(max_queue),
       CEREAL_NVP(max_sessions));
  }
};

struct CapabilitiesReply {
  bool operator==(const CapabilitiesReply&) const = default;
  std::vector<BaseInfo> bases;
  LimitsInfo limits;
  std::vector<std::string> loss_fns;
  std::vector<std::string> encodings;  // "B", "J"
  /// Version 2: the server's embedded default GRPO run config (what `spindle grpo` runs with
  /// no config: the arith recipe), for a client's "run the default" action; "" when none.
  std::string default_run_config_json;
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(bases), CEREAL_NVP(limits), CEREAL_NVP(loss_fns), CEREAL_NVP(encodings));
    if (version >= 2) ar(CEREAL_NVP(default_run_config_json));
  }
};

struct PlacementInfo {
  bool operator==(const PlacementInfo&) const = default;
  std::string revision_id;
  std::string tier;  // "device" | "host" | "loading" | "cold"
  int32_t slot = -1;
  int32_t in_use = 0;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(revision_id), CEREAL_NVP(tier), CEREAL_NVP(slot), CEREAL_NVP(in_use));
  }
};

struct StatusReply {
  bool operator==(const StatusReply&) const = default;
  std::string server_version;
  double uptime_s = 0.0;
  uint64_t queue_depth = 0;       // requests admitted, not finished
  uint64_t parked = 0;            // sampling work waiting for a cold adapter
  uint64_t running_sequences = 0;
  uint64_t training_sessions = 0;
  uint64_t requests_served = 0;
  uint64_t requests_failed = 0;
  double tokens_per_s = 0.0;      // sampled tokens, last 10 s
  // Residency tiers.
  uint32_t device_slots = 0;
  uint32_t device_slots_used = 0;
  uint64_t host_cache_bytes = 0;
  uint64_t host_cache_capacity = 0;
  uint64_t loads_queued = 0;
  uint64_t loads_running = 0;
  double device_hit_rate = 0.0;
  double host_hit_rate = 0.0;
  double mean_load_wait_ms = 0.0;
  std::vector<PlacementInfo> placements;
  // Version 2: where the engine runs (spindled --device) and the device memory it holds.
  std::string device;       // "cpu", "cuda:0"
  std::string device_name;  // "NVIDIA H200 (sm_90, 139 GiB)", "cpu (avx512)"
  std::string dtype;        // the resident base's element type: "F32", "BF16"
  uint64_t base_bytes = 0;          // resident base weights
  uint64_t kv_bytes = 0;            // the KV cache pool
  uint64_t serving_pool_bytes = 0;  // serving adapter slots
  uint64_t training_pool_bytes = 0; // training slots (weights; gradients and moments beyond)
  uint64_t device_free_bytes = 0;   // the CPU: MemAvailable
  uint64_t device_total_bytes = 0;
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(server_version), CEREAL_NVP(uptime_s), CEREAL_NVP(queue_depth),
       CEREAL_NVP(parked), CEREAL_NVP(running_sequences), CEREAL_NVP(training_sessions),
       CEREAL_NVP(requests_served), CEREAL_NVP(requests_failed), CEREAL_NVP(tokens_per_s),
       CEREAL_NVP(device_slots), CEREAL_NVP(device_slots_used), CEREAL_NVP(host_cache_bytes),
       CEREAL_NVP(host_cache_capacity), CEREAL_NVP(loads_queued), CEREAL_NVP(loads_running),
       CEREAL_NVP(device_hit_rate), CEREAL_NVP(host_hit_rate), CEREAL_NVP(mean_load_wait_ms),
       CEREAL_NVP(placements));
    if (version >= 2) {
      ar(CEREAL_NVP(device), CEREAL_NVP(device_name), CEREAL_NVP(dtype), CEREAL_NVP(base_bytes),
         CEREAL_NVP(kv_bytes), CEREAL_NVP(serving_pool_bytes), CEREAL_NVP(training_pool_bytes),
         CEREAL_NVP(device_free_bytes), CEREAL_NVP(device_total_bytes));
    }
  }
};

// ---- training ------------------------------------------------------------------------------

/// Tinker's create_lora_training_client. Creates policy `policy` (auto-named when empty) under
/// the caller's tenant and a training session on it.
struct CreateTrainingRequest {
  bool operator==(const CreateTrainingRequest&) const = default;
  std::string base_model;
  std::string policy;  // policy name; "" = generated
  int32_t rank = 32;
  float alpha = 32.0f;  // 0 = same as rank
  bool train_attn = true;
  bool train_mlp = true;
  bool train_unembed = false;
  uint64_t seed = 0;
  std::string description;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(base_model), CEREAL_NVP(policy), CEREAL_NVP(rank), CEREAL_NVP(alpha),
       CEREAL_NVP(train_attn), CEREAL_NVP(train_mlp), CEREAL_NVP(train_unembed), CEREAL_NVP(seed),
       CEREAL_NVP(description));
  }
};

/// Tinker's create_training_client_from_state: a new session on the policy of `address`, its
/// weights and (if saved) optimizer state loaded from that revision.
struct CreateTrainingFromStateRequest {
  bool operator==(const CreateTrainingFromStateRequest&) const = default;
  std::string address;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(address)); }
};

struct TrainingSessionReply {
  bool operator==(const TrainingSessionReply&) const = default;
  std::string session_id;
  std::string policy_address;  // spindle://tenant/policy
  std::string base_model;
  int32_t rank = 0;
  float alpha = 0.0f;
  int64_t step = 0;            // optimizer steps so far
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(policy_address), CEREAL_NVP(base_model),
       CEREAL_NVP(rank), CEREAL_NVP(alpha), CEREAL_NVP(step));
  }
};

/// Tinker's Datum. model_input: int32 [n] tokens. loss_fn_inputs by name: "target_tokens"
/// (int32 [n], required), "weights", "logprobs", "advantages" (float32 [n]).
struct DatumMsg {
  bool operator==(const DatumMsg&) const = default;
  TensorRef model_input;
  std::vector<NamedTensor> loss_fn_inputs;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(model_input), CEREAL_NVP(loss_fn_inputs));
  }
};

/// op "forward" and "forward_backward".
struct ForwardBackwardRequest {
  bool operator==(const ForwardBackwardRequest&) const = default;
  std::string session_id;
  std::vector<DatumMsg> data;
  std::string loss_fn;  // cross_entropy | importance_sampling | ppo | cispo | dro
  std::vector<NamedValue> loss_fn_config;  // clip_low_threshold, clip_high_threshold, beta
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(data), CEREAL_NVP(loss_fn), CEREAL_NVP(loss_fn_config));
  }
};

struct ForwardBackwardReply {
  bool operator==(const ForwardBackwardReply&) const = default;
  /// Per datum: {"logprobs": float32 [n]} (log p of each target token).
  std::vector<std::vector<NamedTensor>> loss_fn_outputs;
  std::vector<NamedValue> metrics;  // "loss:sum", "n_tokens:sum", "clip_fraction:mean"
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(loss_fn_outputs), CEREAL_NVP(metrics));
  }
};

struct AdamParamsMsg {
  bool operator==(const AdamParamsMsg&) const = default;
  float learning_rate = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-12f;
  float weight_decay = 0.0f;
  float grad_clip_norm = 0.0f;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(learning_rate), CEREAL_NVP(beta1), CEREAL_NVP(beta2), CEREAL_NVP(eps),
       CEREAL_NVP(weight_decay), CEREAL_NVP(grad_clip_norm));
  }
};

struct OptimStepRequest {
  bool operator==(const OptimStepRequest&) const = default;
  std::string session_id;
  AdamParamsMsg adam_params;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(adam_params));
  }
};
struct OptimStepReply {
  bool operator==(const OptimStepReply&) const = default;
  int64_t step = 0;
  double grad_norm = 0.0;
  bool clipped = false;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(step), CEREAL_NVP(grad_norm), CEREAL_NVP(clipped));
  }
};

/// op "save_weights" (weights only: a sampler revision) and "save_state" (weights + AdamW).
/// The revision is durable and in the catalog before the reply.
struct SaveRequest {
  bool operator==(const SaveRequest&) const = default;
  std::string session_id;
  std::string name;          // free-form label, recorded in the revision's metrics JSON
  std::string metrics_json;  // "" or a JSON object stored with the revision
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(name), CEREAL_NVP(metrics_json));
  }
};
struct SaveReply {
  bool operator==(const SaveReply&) const = default;
  std::string revision_id;
  std::string address;  // spindle://tenant/policy@revision
  int64_t bytes = 0;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(revision_id), CEREAL_NVP(address), CEREAL_NVP(bytes));
  }
};

/// Loads weights (and optimizer state, when the revision has it) into the session.
struct LoadStateRequest {
  bool operator==(const LoadStateRequest&) const = default;
  std::string session_id;
  std::string address;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(address));
  }
};

struct SessionRequest {  // op "close_training"
  bool operator==(const SessionRequest&) const = default;
  std::string session_id;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(session_id)); }
};

// ---- sampling ------------------------------------------------------------------------------

struct SamplingParamsMsg {
  bool operator==(const SamplingParamsMsg&) const = default;
  int32_t max_tokens = 16;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(max_tokens), CEREAL_NVP(temperature), CEREAL_NVP(top_k), CEREAL_NVP(top_p),
       CEREAL_NVP(seed), CEREAL_NVP(stop_token_ids), CEREAL_NVP(stop_strings));
  }
};

/// address: "spindle://tenant/policy[@rev|@latest]" or a bare base model id (no adapter).
struct SampleRequest {
  bool operator==(const SampleRequest&) const = default;
  std::string address;
  TensorRef prompt;  // int32 [n], n >= 1
  int32_t num_samples = 1;
  SamplingParamsMsg sampling_params;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(address), CEREAL_NVP(prompt), CEREAL_NVP(num_samples),
       CEREAL_NVP(sampling_params));
  }
};

struct SequenceMsg {
  bool operator==(const SequenceMsg&) const = default;
  TensorRef tokens;    // int32 [m]
  TensorRef logprobs;  // float32 [m]
  std::string stop_reason;  // "stop" | "length"
  std::string text;         // decoded completion (stop string/token excluded)
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(tokens), CEREAL_NVP(logprobs), CEREAL_NVP(stop_reason), CEREAL_NVP(text));
  }
};
struct SampleReply {
  bool operator==(const SampleReply&) const = default;
  std::string revision_id;  // what actually served the request ("" = base)
  std::vector<SequenceMsg> sequences;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(revision_id), CEREAL_NVP(sequences));
  }
};

struct ComputeLogprobsRequest {
  bool operator==(const ComputeLogprobsRequest&) const = default;
  std::string address;
  TensorRef prompt;  // int32 [n]
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(address), CEREAL_NVP(prompt));
  }
};
struct ComputeLogprobsReply {
  bool operator==(const ComputeLogprobsReply&) const = default;
  std::string revision_id;
  TensorRef logprobs;  // float32 [n]; entry 0 is NaN (no prediction for the first token)
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(revision_id), CEREAL_NVP(logprobs));
  }
};

/// op "tokenize": text -> token ids with the base's tokenizer (so thin clients need none).
struct TokenizeRequest {
  std::string base_model;  // "" = the server's default base
  std::string text;
  /// The tokenizer's own special tokens (llama2.c: BOS first), as Hugging Face's
  /// add_special_tokens=True. Special tokens written literally in `text` are recognised.
  bool add_special_tokens = true;
  bool operator==(const TokenizeRequest&) const = default;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(base_model), CEREAL_NVP(text), CEREAL_NVP(add_special_tokens));
  }
};
struct TokenizeReply {
  std::string base_model;
  TensorRef tokens;  // int32 [n]
  bool operator==(const TokenizeReply&) const = default;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(base_model), CEREAL_NVP(tokens));
  }
};

}  // namespace spindle::protocol

CEREAL_CLASS_VERSION(spindle::protocol::TensorRef, 1);
CEREAL_CLASS_VERSION(spindle::protocol::NamedValue, 1);
CEREAL_CLASS_VERSION(spindle::protocol::NamedTensor, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ErrorInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::Empty, 1);
CEREAL_CLASS_VERSION(spindle::protocol::HandshakeRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::HandshakeReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::BaseInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::LimitsInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::CapabilitiesReply, 2);
CEREAL_CLASS_VERSION(spindle::protocol::PlacementInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::StatusReply, 2);
CEREAL_CLASS_VERSION(spindle::protocol::CreateTrainingRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::CreateTrainingFromStateRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::TrainingSessionReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::DatumMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ForwardBackwardRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ForwardBackwardReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::AdamParamsMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::OptimStepRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::OptimStepReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SaveRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SaveReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::LoadStateRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SessionRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SamplingParamsMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SampleRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SequenceMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SampleReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ComputeLogprobsRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ComputeLogprobsReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::TokenizeRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::TokenizeReply, 1);

// The other groups of messages, in files of their own.
#include "spindle/protocol/messages_catalog.h"  // IWYU pragma: export
#include "spindle/protocol/messages_runs.h"     // IWYU pragma: export
#include "spindle/protocol/messages_studio.h"   // IWYU pragma: export
