#pragma once
/// \file wire.h
/// The one serializer module (STYLE.md 6): encodes and decodes request and reply headers in
/// both encodings, checks limits, and reads/writes tensor frames. No sockets here: callers pass
/// the multipart message as a list of frames (frame 0 = header; ROUTER envelopes stripped).
///
/// Error policy at this boundary: decoding never trusts its input. Anything malformed throws
/// ProtocolError with a wire code and a message naming the field, frame or limit; it carries
/// whatever of the header was read (request_id, op) so the server can still answer the right
/// request with a typed error.

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "spindle/protocol/messages.h"

namespace spindle::protocol {

enum class Encoding : char { binary = 'B', json = 'J' };

/// Every operation. Names on the wire are exactly the enumerator names.
enum class Op : uint8_t {
  handshake,                   // HandshakeRequest -> HandshakeReply
  capabilities,                // Empty -> CapabilitiesReply
  status,                      // Empty -> StatusReply
  create_training,             // CreateTrainingRequest -> TrainingSessionReply
  create_training_from_state,  // CreateTrainingFromStateRequest -> TrainingSessionReply
  forward,                     // ForwardBackwardRequest -> ForwardBackwardReply (no gradients)
  forward_backward,            // ForwardBackwardRequest -> ForwardBackwardReply
  optim_step,                  // OptimStepRequest -> OptimStepReply
  save_weights,                // SaveRequest -> SaveReply
  save_state,                  // SaveRequest -> SaveReply
  load_state,                  // LoadStateRequest -> TrainingSessionReply
  close_training,              // SessionRequest -> Empty
  sample,                      // SampleRequest -> SampleReply
  compute_logprobs,            // ComputeLogprobsRequest -> ComputeLogprobsReply
  catalog_list,                // CatalogListRequest -> PolicyListReply
  catalog_search,              // CatalogSearchRequest -> PolicyListReply
  catalog_show,                // AddressRequest -> PolicyReply
  catalog_lineage,             // LineageRequest -> LineageReply
  catalog_fork,                // ForkRequest -> PolicyReply
  catalog_rollback,            // AddressRequest -> PolicyReply
  catalog_tag,                 // TagRequest -> PolicyReply
  catalog_delete,              // AddressRequest -> Empty
  import_peft,                 // ImportPeftRequest -> PolicyReply
  export_peft,                 // AddressRequest -> ExportPeftReply
  tokenize,                    // TokenizeRequest -> TokenizeReply
  run_start,                   // RunStartRequest -> RunStartReply
  run_list,                    // RunListRequest -> RunListReply
  run_status,                  // RunStatusRequest -> RunStatusReply
  run_stop,                    // RunIdRequest -> RunStatusReply
  run_resume,                  // RunIdRequest -> RunStatusReply
  reward_test,                 // RewardTestRequest -> RewardTestReply
  reward_plugins,              // Empty -> RewardPluginsReply
  plugin_rescan,               // Empty -> RewardPluginsReply (after rescanning the plugin dirs)
  datasets,                    // DatasetsRequest -> DatasetsReply
  sample_stream,               // SampleRequest -> SampleStreamReply... (a stream, last final)
  subscribe,                   // SubscribeRequest -> EventReply... (a stream, last final)
  unsubscribe,                 // UnsubscribeRequest -> Empty
  detokenize,                  // DetokenizeRequest -> DetokenizeReply
  tokenizer_info,              // TokenizerInfoRequest -> TokenizerInfoReply
  heartbeat,                   // HeartbeatRequest -> HeartbeatReply
  catalog_promote,             // AddressRequest -> PolicyReply (an ephemeral revision made durable)
  cluster_status,              // Empty -> ClusterStatusReply (a coordinator's workers)
};
inline constexpr int kOpCount = int(Op::cluster_status) + 1;

const char* op_name(Op op);
std::optional<Op> op_from_name(std::string_view name);

/// Wire error codes (the `code` string of ErrorInfo).
namespace errc {
inline constexpr const char* bad_request = "bad_request";              // malformed frames/archive
inline constexpr const char* unsupported_version = "unsupported_version";
inline constexpr const char* unknown_op = "unknown_op";
inline constexpr const char* unauthenticated = "unauthenticated";      // missing/unknown token
inline constexpr const char* forbidden = "forbidden";                  // another tenant's object
inline constexpr const char* invalid_argument = "invalid_argument";    // a field out of range
inline constexpr const char* limit_exceeded = "limit_exceeded";        // a LimitsInfo bound
inline constexpr const char* not_found = "not_found";
inline constexpr const char* already_exists = "already_exists";
inline constexpr const char* failed_precondition = "failed_precondition";  // e.g. no head yet
inline constexpr const char* unsupported = "unsupported";
inline constexpr const char* resource_exhausted = "resource_exhausted";    // slots, KV blocks, disk
inline constexpr const char* data_loss = "data_loss";  // stored bytes damaged (checksum, catalog)
inline constexpr const char* overloaded = "overloaded";  // queue full: retry (ErrorInfo.retry_after_ms)
inline constexpr const char* unavailable = "unavailable";  // shutting down
inline constexpr const char* internal = "internal";
}  // namespace errc

class ProtocolError : public std::runtime_error {
 public:
  ProtocolError(std::string code, const std::string& message)
      : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }
  // Filled in by the decoder when it got that far.
  uint64_t request_id = 0;
  std::optional<Op> op;
  std::optional<Encoding> encoding;

 private:
  std::string code_;
};

using RequestBody =
    std::variant<Empty, HandshakeRequest, CreateTrainingRequest, CreateTrainingFromStateRequest,
                 ForwardBackwardRequest, OptimStepRequest, SaveRequest, LoadStateRequest,
                 SessionRequest, SampleRequest, ComputeLogprobsRequest, CatalogListRequest,
                 CatalogSearchRequest, AddressRequest, LineageRequest, ForkRequest, TagRequest,
                 ImportPeftRequest, TokenizeRequest, RunStartRequest, RunListRequest,
                 RunStatusRequest, RunIdRequest, RewardTestRequest, DatasetsRequest,
                 SubscribeRequest, UnsubscribeRequest, DetokenizeRequest,
                 TokenizerInfoRequest, HeartbeatRequest>;
using ReplyBody =
    std::variant<Empty, HandshakeReply, CapabilitiesReply, StatusReply, TrainingSessionReply,
                 ForwardBackwardReply, OptimStepReply, SaveReply, SampleReply,
                 ComputeLogprobsReply, PolicyListReply, PolicyReply, LineageReply,
                 ExportPeftReply, TokenizeReply, RunStartReply, RunListReply,
                 RunStatusReply, RewardTestReply, RewardPluginsReply, DatasetsReply,
                 SampleStreamReply, EventReply, DetokenizeReply, TokenizerInfoReply,
                 HeartbeatReply, ClusterStatusReply>;

/// The body a request (reply) of `op` must hold, default-constructed.
RequestBody empty_request_body(Op op);
ReplyBody empty_reply_body(Op op);

using Frames = std::vector<std::string>;  // raw tensor frames, in TensorRef::frame order

struct Request {
  Encoding encoding = Encoding::binary;
  uint32_t protocol_version = kProtocolVersion;
  uint64_t request_id = 0;
  std::string token;
  Op op = Op::handshake;
  RequestBody body;
  Frames frames;
};

struct Reply {
  Encoding encoding = Encoding::binary;
  uint32_t protocol_version = kProtocolVersion;
  uint64_t request_id = 0;
  Op op = Op::handshake;
  /// Error replies only: the request's op was not understood (unknown_op, or a header too
  /// malformed to read it); `op` is then "" on the wire and `op` here is meaningless.
  bool op_unknown = false;
  bool ok = true;
  ErrorInfo error;  // when !ok
  ReplyBody body;   // when ok
  Frames frames;
};

/// Whether `reply` ends its request: true for every reply except a `sample_stream` or
/// `subscribe` message whose body has `final == false` (error replies always end a stream).
bool is_final_reply(const Reply& reply);
/// Whether `op` answers with a stream of replies (sample_stream, subscribe).
bool is_stream_op(Op op);

/// Bounds checked while decoding (frame sizes and counts) and by validate_request (the rest).
struct Limits {
  uint64_t max_header_bytes = 1 << 20;
  uint64_t max_frame_bytes = 256ull << 20;
  uint32_t max_frames = 65536;
  uint32_t max_batch = 1024;
  uint32_t max_tokens_per_request = 1 << 20;  // all tensors of one request, in elements
  uint32_t max_num_samples = 64;
  uint32_t max_sample_tokens = 4096;
  uint32_t max_rank = 256;
  uint32_t max_string_bytes = 1 << 16;  // any string field (PEFT config JSON: max_header_bytes)
  uint32_t max_reward_test_samples = 1024;  // reward_test: rows x num_samples
  LimitsInfo info() const;              // for CapabilitiesReply (queue/session fields left 0)
};

/// Header frame bytes for `request` (frames travel separately, after it).
std::string encode_request_header(const Request& request);
std::string encode_reply_header(const Reply& reply);

/// parts[0] is the header frame, parts[1..] the tensor frames. Throws ProtocolError
/// (bad_request, unsupported_version, unknown_op, limit_exceeded) with as much header as was
/// read. A request with another protocol_version fails with unsupported_version before its
/// body is read (the body layout may differ).
Request decode_request(std::span<const std::string> parts, const Limits& limits = {});
Reply decode_reply(std::span<const std::string> parts, const Limits& limits = {});

/// Semantic checks of a decoded request against `limits`: every TensorRef names an existing
/// frame whose size matches dtype x shape, tensors have the rank and dtype their field needs,
/// counts and token totals are within bounds, strings are within max_string_bytes, numbers
/// are finite. Throws ProtocolError (invalid_argument or limit_exceeded) naming the field,
/// e.g. "data[3].loss_fn_inputs.weights: 12 values, model_input has 13".
void validate_request(const Request& request, const Limits& limits);

/// An error reply for `request_id`/`op` in `encoding`.
Reply make_error_reply(Encoding encoding, uint64_t request_id, Op op, std::string code,
                       std::string message);
/// The reply to a request that failed to decode or validate: the error's code and message,
/// with as much of the header as the decoder read (request_id 0 and op "" when it read none;
/// binary encoding when even the encoding byte was bad).
Reply make_error_reply(const ProtocolError& error);

// ---- tensor frames ---------------------------------------------------------------------------

/// Appends a frame holding `values` (little-endian) and returns its TensorRef (1-D unless
/// `shape` is given; prod(shape) must equal values.size()).
TensorRef add_tensor(Frames& frames, std::span<const int32_t> values,
                     std::vector<int64_t> shape = {});
TensorRef add_tensor(Frames& frames, std::span<const float> values,
                     std::vector<int64_t> shape = {});
TensorRef add_bytes(Frames& frames, std::string_view bytes);  // dtype uint8

/// Reads a tensor back, checking the frame exists, dtype matches and the size agrees with the
/// shape. `field` names it in errors. Throws ProtocolError(bad_request).
std::vector<int32_t> read_int32(const TensorRef& ref, const Frames& frames,
                                std::string_view field);
std::vector<float> read_float32(const TensorRef& ref, const Frames& frames,
                                std::string_view field);
std::string_view read_bytes(const TensorRef& ref, const Frames& frames, std::string_view field);

}  // namespace spindle::protocol
