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

/// One served base in StatusReply (version 3).
struct BaseStatus {
  bool operator==(const BaseStatus&) const = default;
  std::string id;
  std::string device;  // "cpu", "cuda:0"
  std::string dtype;
  uint64_t base_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t serving_pool_bytes = 0;
  uint64_t training_pool_bytes = 0;
  uint32_t device_slots = 0;
  uint32_t device_slots_used = 0;
  uint64_t running_sequences = 0;
  uint64_t training_sessions = 0;
  uint64_t queue_depth = 0;  // scheduler work queued or running on this base
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(id), CEREAL_NVP(device), CEREAL_NVP(dtype), CEREAL_NVP(base_bytes),
       CEREAL_NVP(kv_bytes), CEREAL_NVP(serving_pool_bytes), CEREAL_NVP(training_pool_bytes),
       CEREAL_NVP(device_slots), CEREAL_NVP(device_slots_used), CEREAL_NVP(running_sequences),
       CEREAL_NVP(training_sessions), CEREAL_NVP(queue_depth));
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
  /// Version 3: every served base (the fields above sum over them; device/dtype are the
  /// first's).
  std::vector<BaseStatus> bases;
  /// Version 4: residency counters since start, summed over bases. Admissions of sample work
  /// whose adapter was not in a serving slot park it: cold_parks counts those that found it
  /// not in host memory (a load was queued), busy_parks those that found it in host memory but
  /// every slot in use (a parked request is retried as slots free, so one long wait can count
  /// more than once; a growing count means more adapters are wanted at once than
  /// --serving-slots holds); slot_evictions counts adapters moved out of a slot to make room.
  uint64_t cold_parks = 0;
  uint64_t busy_parks = 0;
  uint64_t slot_evictions = 0;
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
    if (version >= 3) ar(CEREAL_NVP(bases));
    if (version >= 4) ar(CEREAL_NVP(cold_parks), CEREAL_NVP(busy_parks), CEREAL_NVP(slot_evictions));
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
  /// Version 2: the client's user_metadata (Tinker's ServiceClient(user_metadata=...)): "" or a
  /// JSON object of at most 16384 bytes, stored on the policy (PolicyInfo.user_metadata_json).
  std::string user_metadata_json;
  /// Version 3: data-parallel ranks (1..64). More than 1 trains the session on that many workers
  /// of a coordinator, each with its share of every forward_backward, their gradients summed
  /// before each optim_step (docs/cluster.md "Data-parallel training").
  uint32_t data_parallel = 1;
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(base_model), CEREAL_NVP(policy), CEREAL_NVP(rank), CEREAL_NVP(alpha),
       CEREAL_NVP(train_attn), CEREAL_NVP(train_mlp), CEREAL_NVP(train_unembed), CEREAL_NVP(seed),
       CEREAL_NVP(description));
    if (version >= 2) ar(CEREAL_NVP(user_metadata_json));
    if (version >= 3) ar(CEREAL_NVP(data_parallel));
  }
};

/// A new session whose weights (and, with_optimizer, AdamW state) come from revision `address`.
/// Version 1 readers get fork = false, with_optimizer = true: a session on the revision's own
/// policy, resuming exactly (Tinker's create_training_client_from_state_with_optimizer).
/// fork = true makes a new policy forked at that revision (as catalog_fork) and puts the
/// session on it; with fork and !with_optimizer this is Tinker's
/// create_training_client_from_state (weights only, a fresh optimizer, a new policy line).
struct CreateTrainingFromStateRequest {
  bool operator==(const CreateTrainingFromStateRequest&) const = default;
  std::string address;
  bool with_optimizer = true;   // version 2
  bool fork = false;            // version 2
  std::string policy;           // version 2: the fork's name ("" = "<policy>-<8 hex>")
  std::string user_metadata_json;  // version 2: stored on the fork (as CreateTrainingRequest)
  uint32_t data_parallel = 1;      // version 3: as CreateTrainingRequest's
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(address));
    if (version >= 2)
      ar(CEREAL_NVP(with_optimizer), CEREAL_NVP(fork), CEREAL_NVP(policy),
         CEREAL_NVP(user_metadata_json));
    if (version >= 3) ar(CEREAL_NVP(data_parallel));
  }
};

struct TrainingSessionReply {
  bool operator==(const TrainingSessionReply&) const = default;
  std::string session_id;
  std::string policy_address;  // spindle://tenant/policy
  std::string base_model;
  int32_t rank = 0;
  float alpha = 0.0f;
  int64_t step = 0;            // optimizer steps so far
  /// Version 2. The session is closed (slots, KV and optimizer memory freed; saved revisions
  /// stay) after lease_ms without a request naming it or a `heartbeat` listing it.
  uint32_t lease_ms = 0;
  std::string user_metadata_json;  // the policy's
  std::string revision_id;         // the revision the weights came from ("" = fresh)
  uint32_t data_parallel = 1;      // version 3: the workers it trains on (1 = one)
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(policy_address), CEREAL_NVP(base_model),
       CEREAL_NVP(rank), CEREAL_NVP(alpha), CEREAL_NVP(step));
    if (version >= 2)
      ar(CEREAL_NVP(lease_ms), CEREAL_NVP(user_metadata_json), CEREAL_NVP(revision_id));
    if (version >= 3) ar(CEREAL_NVP(data_parallel));
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
/// The revision is in the catalog (and its file synced) before the reply.
struct SaveRequest {
  bool operator==(const SaveRequest&) const = default;
  std::string session_id;
  std::string name;          // free-form label, recorded in the revision's metrics JSON
  std::string metrics_json;  // "" or a JSON object stored with the revision
  /// Version 2: 0 = durable; > 0 = ephemeral (Tinker's ttl_seconds): servable and addressable
  /// until that many seconds after the save (at most 30 days), then collected unless promoted
  /// (catalog_promote).
  int64_t ttl_seconds = 0;
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(name), CEREAL_NVP(metrics_json));
    if (version >= 2) ar(CEREAL_NVP(ttl_seconds));
  }
};
struct SaveReply {
  bool operator==(const SaveReply&) const = default;
  std::string revision_id;
  std::string address;  // spindle://tenant/policy@revision
  int64_t bytes = 0;
  int64_t expires_ms = 0;  // version 2: Unix ms when an ephemeral revision expires; 0 = durable
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(revision_id), CEREAL_NVP(address), CEREAL_NVP(bytes));
    if (version >= 2) ar(CEREAL_NVP(expires_ms));
  }
};

/// Loads the revision's weights into the session; with_optimizer (version 1: always) also its
/// AdamW state when it has one, else the optimizer starts fresh (Tinker's load_state is
/// with_optimizer = false, load_state_with_optimizer true). Ordered after every request of the
/// session sent before it (the session's requests run in arrival order).
struct LoadStateRequest {
  bool operator==(const LoadStateRequest&) const = default;
  std::string session_id;
  std::string address;
  bool with_optimizer = true;  // version 2
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(address));
    if (version >= 2) ar(CEREAL_NVP(with_optimizer));
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
  /// Version 2 (op sample only): also score the prompt (SampleReply.prompt_logprobs) and list
  /// the top topk_prompt_logprobs (0..20) tokens at each prompt position.
  bool include_prompt_logprobs = false;
  int32_t topk_prompt_logprobs = 0;
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(address), CEREAL_NVP(prompt), CEREAL_NVP(num_samples),
       CEREAL_NVP(sampling_params));
    if (version >= 2) ar(CEREAL_NVP(include_prompt_logprobs), CEREAL_NVP(topk_prompt_logprobs));
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
  /// Version 2, always present (shape [0] / [0, 0] when not asked for):
  /// prompt_logprobs float32 [n] (log p of each prompt token given the ones before; entry 0
  /// NaN); topk_prompt_ids int32 [n, k] and topk_prompt_logprobs float32 [n, k], each row the
  /// k most likely next tokens at that position, most likely first (row 0: ids -1, NaN).
  TensorRef prompt_logprobs;
  TensorRef topk_prompt_ids;
  TensorRef topk_prompt_logprobs;
  template <class A> void serialize(A& ar, uint32_t version) {
    ar(CEREAL_NVP(revision_id), CEREAL_NVP(sequences));
    if (version >= 2)
      ar(CEREAL_NVP(prompt_logprobs), CEREAL_NVP(topk_prompt_ids),
         CEREAL_NVP(topk_prompt_logprobs));
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

/// op "detokenize": token ids -> text with the base's tokenizer (the exact inverse `tokenize`
/// and sampling use). skip_special_tokens drops the tokenizer's special tokens first.
struct DetokenizeRequest {
  bool operator==(const DetokenizeRequest&) const = default;
  std::string base_model;  // "" = the server's default base
  TensorRef tokens;        // int32 [n]
  bool skip_special_tokens = false;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(base_model), CEREAL_NVP(tokens), CEREAL_NVP(skip_special_tokens));
  }
};
struct DetokenizeReply {
  bool operator==(const DetokenizeReply&) const = default;
  std::string base_model;
  std::string text;  // invalid UTF-8 (a split character) is repaired to U+FFFD on the JSON wire
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(base_model), CEREAL_NVP(text));
  }
};

struct SpecialTokenMsg {
  bool operator==(const SpecialTokenMsg&) const = default;
  int32_t id = 0;
  std::string text;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(id), CEREAL_NVP(text)); }
};

/// op "tokenizer_info": what a client-side tokenizer object needs besides encode/decode.
struct TokenizerInfoRequest {
  bool operator==(const TokenizerInfoRequest&) const = default;
  std::string base_model;  // "" = the server's default base
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(base_model)); }
};
struct TokenizerInfoReply {
  bool operator==(const TokenizerInfoReply&) const = default;
  std::string base_model;
  std::string kind;  // "llama2c" | "bpe"
  int32_t vocab_size = 0;
  int32_t bos_token = -1;  // -1 = none
  int32_t eos_token = -1;
  int32_t pad_token = -1;
  std::string bos_text, eos_text, pad_text;  // "" = none
  std::vector<SpecialTokenMsg> special_tokens;  // by id
  /// The base's tokenizer_config.json chat_template (a string, or the list entry named
  /// "default"); "" = none. Clients render it with Jinja (Hugging Face's sandboxed rules).
  std::string chat_template;
  bool add_bos_token = false;  // whether tokenize's add_special_tokens prepends BOS
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(base_model), CEREAL_NVP(kind), CEREAL_NVP(vocab_size), CEREAL_NVP(bos_token),
       CEREAL_NVP(eos_token), CEREAL_NVP(pad_token), CEREAL_NVP(bos_text), CEREAL_NVP(eos_text),
       CEREAL_NVP(pad_text), CEREAL_NVP(special_tokens), CEREAL_NVP(chat_template),
       CEREAL_NVP(add_bos_token));
  }
};

/// op "heartbeat": renews the leases of the caller's sessions `session_ids` (any request naming
/// a session renews it too). unknown: the ids that are not (or no longer) live sessions of the
/// caller's tenant, e.g. expired ones.
struct HeartbeatRequest {
  bool operator==(const HeartbeatRequest&) const = default;
  std::vector<std::string> session_ids;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(session_ids)); }
};
struct HeartbeatReply {
  bool operator==(const HeartbeatReply&) const = default;
  uint32_t lease_ms = 0;
  std::vector<std::string> unknown;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(lease_ms), CEREAL_NVP(unknown));
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
CEREAL_CLASS_VERSION(spindle::protocol::StatusReply, 4);
CEREAL_CLASS_VERSION(spindle::protocol::CreateTrainingRequest, 3);
CEREAL_CLASS_VERSION(spindle::protocol::CreateTrainingFromStateRequest, 3);
CEREAL_CLASS_VERSION(spindle::protocol::TrainingSessionReply, 3);
CEREAL_CLASS_VERSION(spindle::protocol::DatumMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ForwardBackwardRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ForwardBackwardReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::AdamParamsMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::OptimStepRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::OptimStepReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SaveRequest, 2);
CEREAL_CLASS_VERSION(spindle::protocol::SaveReply, 2);
CEREAL_CLASS_VERSION(spindle::protocol::LoadStateRequest, 2);
CEREAL_CLASS_VERSION(spindle::protocol::SessionRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SamplingParamsMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SampleRequest, 2);
CEREAL_CLASS_VERSION(spindle::protocol::SequenceMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SampleReply, 2);
CEREAL_CLASS_VERSION(spindle::protocol::ComputeLogprobsRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::ComputeLogprobsReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::TokenizeRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::TokenizeReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::DetokenizeRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::DetokenizeReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SpecialTokenMsg, 1);
CEREAL_CLASS_VERSION(spindle::protocol::TokenizerInfoRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::TokenizerInfoReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::HeartbeatRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::HeartbeatReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::BaseStatus, 1);

// The other groups of messages, in files of their own.
#include "spindle/protocol/messages_catalog.h"  // IWYU pragma: export
#include "spindle/protocol/messages_runs.h"     // IWYU pragma: export
#include "spindle/protocol/messages_studio.h"   // IWYU pragma: export
#include "spindle/protocol/messages_cluster.h"  // IWYU pragma: export
