#pragma once
/// \file client.h
/// The C++ client of spindled (PROTOCOL.md): one DEALER socket, synchronous calls with
/// `overloaded` retry, asynchronous send/receive, and typed helpers for every op.
///
/// Threading: a Client owns its socket (STYLE.md 6); use it from one thread at a time. Make
/// one Client per thread for concurrent callers.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "spindle/protocol/wire.h"

namespace spindle::protocol {

struct ClientOptions {
  std::string endpoint;  ///< e.g. "ipc:///run/user/1000/spindle.sock", "tcp://host:7878"
  std::string token;
  /// z85 CURVE keys; server_public_key non-empty => CURVE on. Empty client keys => a fresh
  /// ephemeral pair.
  std::string server_public_key;
  std::string client_public_key;
  std::string client_secret_key;
  int timeout_ms = 600000;           ///< per attempt: send to reply
  int max_overloaded_retries = 100;  ///< then ClientError("overloaded")
  Encoding encoding = Encoding::binary;
  std::string client_name = "spindle-cpp";
};

/// An error reply (code = the wire code), a timeout ("timeout"), a reply that does not decode
/// (its ProtocolError code), or a socket failure ("transport").
class ClientError : public std::runtime_error {
 public:
  ClientError(std::string code, const std::string& message, uint64_t request_id = 0)
      : std::runtime_error(code + ": " + message), code_(std::move(code)), request_id_(request_id) {}
  const std::string& code() const { return code_; }
  uint64_t request_id() const { return request_id_; }

 private:
  std::string code_;
  uint64_t request_id_;
};

/// One training example, Tinker's Datum with tensors inline. Empty float vectors are absent.
struct Datum {
  std::vector<int32_t> model_input;
  std::vector<int32_t> target_tokens;
  std::vector<float> weights;
  std::vector<float> logprobs;    ///< sampler logprobs (importance_sampling, ppo, cispo, dro)
  std::vector<float> advantages;  ///< (importance_sampling, ppo, cispo, dro)
};

struct ForwardBackwardResult {
  std::vector<std::vector<float>> logprobs;  ///< per datum: log p of each target token
  std::vector<NamedValue> metrics;           ///< "loss:sum", "n_tokens:sum", ...
  /// The metric's value; throws ClientError("not_found") when absent.
  double metric(std::string_view name) const;
};

struct SampledSequence {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string stop_reason;  ///< "stop" | "length"
  std::string text;
};
struct SampleResult {
  std::string revision_id;  ///< "" = base model
  std::vector<SampledSequence> sequences;
};

/// One scored completion of reward_test (RewardSampleInfo with its tokens read from the frames).
struct RewardTestSample {
  uint32_t row = 0;  ///< index into the request's rows
  std::vector<int32_t> tokens;
  std::string text;
  std::string stop_reason;
  std::vector<double> scores;      ///< unweighted, per term of the spec
  std::vector<std::string> infos;  ///< plugin info per term ("" = none)
  double total = 0.0;              ///< sum of weight x score
};
struct RewardTestResult {
  std::string revision_id;  ///< "" = base model
  std::vector<RewardTermInfo> terms;
  DistributionInfo total;
  std::vector<RewardTestSample> samples;  ///< row-major
};

struct LogprobsResult {
  std::string revision_id;
  std::vector<float> logprobs;  ///< [n]; entry 0 is NaN
};

struct ExportedPeft {
  std::string revision_id;
  std::string adapter_config_json;
  std::string adapter_model;  ///< safetensors bytes
};

class Client {
 public:
  /// Connects a DEALER socket and performs the handshake. Throws ClientError.
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const HandshakeReply& server() const;
  const ClientOptions& options() const;

  /// Sends and waits for the reply with this request's id (replies to send() calls that
  /// arrive meanwhile are kept for receive()). On `overloaded` waits error.retry_after_ms
  /// (at least 1 ms) and resends under a new id, at most max_overloaded_retries times; on
  /// `unavailable` resends sample, compute_logprobs and reward_test every 100 ms, at most 20
  /// times (PROTOCOL.md "Unavailable"). Throws
  /// ClientError(code, message) on an error reply, ClientError("timeout") after timeout_ms.
  Reply call(Op op, RequestBody body, Frames frames = {});

  /// call() for a stream op (sample_stream, subscribe): `on_message` gets every non-final
  /// message of the stream, in order; returns the final one. timeout_ms applies to each message.
  Reply call_stream(Op op, RequestBody body, Frames frames,
                    const std::function<void(const Reply&)>& on_message);

  /// Asynchronous: sends and returns the request id; any number may be in flight.
  uint64_t send(Op op, RequestBody body, Frames frames = {});
  /// The next reply to a send() (any id, error replies included: check Reply::ok), or
  /// nullopt when none arrives within timeout_ms. Throws ClientError on a malformed reply.
  /// A stream's id stays pending until its final message (is_final_reply).
  std::optional<Reply> receive(int timeout_ms);

  // ---- typed helpers (each is call() plus decoding; all throw ClientError) ----------------
  CapabilitiesReply capabilities();
  StatusReply status();
  ClusterStatusReply cluster_status();
  TrainingSessionReply create_training(const CreateTrainingRequest& request);
  TrainingSessionReply create_training_from_state(const std::string& address);
  ForwardBackwardResult forward(const std::string& session_id, const std::vector<Datum>& data,
                                const std::string& loss_fn = "cross_entropy",
                                const std::vector<NamedValue>& loss_fn_config = {});
  ForwardBackwardResult forward_backward(const std::string& session_id,
                                         const std::vector<Datum>& data,
                                         const std::string& loss_fn = "cross_entropy",
                                         const std::vector<NamedValue>& loss_fn_config = {});
  OptimStepReply optim_step(const std::string& session_id, const AdamParamsMsg& adam = {});
  SaveReply save_weights(const std::string& session_id, const std::string& name = "",
                         const std::string& metrics_json = "");
  SaveReply save_state(const std::string& session_id, const std::string& name = "",
                       const std::string& metrics_json = "");
  TrainingSessionReply load_state(const std::string& session_id, const std::string& address);
  void close_training(const std::string& session_id);
  SampleResult sample(const std::string& address, std::span<const int32_t> prompt,
                      int32_t num_samples = 1, const SamplingParamsMsg& params = {});
  LogprobsResult compute_logprobs(const std::string& address, std::span<const int32_t> prompt);
  PolicyListReply catalog_list(const CatalogListRequest& request = {});
  PolicyListReply catalog_search(const std::string& text, uint32_t limit = 20);
  PolicyReply catalog_show(const std::string& address);
  LineageReply catalog_lineage(const std::string& address, int32_t max_ancestors = 1000,
                               int32_t max_descendants = 1000);
  PolicyReply catalog_fork(const std::string& address, const std::string& name);
  PolicyReply catalog_rollback(const std::string& address);
  PolicyReply catalog_tag(const std::string& address, const std::vector<std::string>& add,
                          const std::vector<std::string>& remove = {});
  void catalog_delete(const std::string& address);
  PolicyReply import_peft(const std::string& name, const std::string& base_id,
                          const std::string& adapter_config_json, std::string_view adapter_model,
                          const std::string& description = "");
  ExportedPeft export_peft(const std::string& address);
  /// Token ids of `text` under the base's tokenizer ("" = the server's default base).
  std::vector<int32_t> tokenize(const std::string& text, bool add_special_tokens = true,
                                const std::string& base_model = "");
  /// GRPO runs on the server (PROTOCOL.md "GRPO runs").
  RunStartReply run_start(const std::string& config_json, bool resume = false);
  RunListReply run_list(uint32_t limit = 50, const std::string& cursor = "");
  RunStatusReply run_status(const std::string& run_id, int64_t metrics_since_step = 0);
  RunStatusReply run_stop(const std::string& run_id);
  RunStatusReply run_resume(const std::string& run_id);
  /// Samples request.num_samples completions per row from request.address and scores them
  /// with request.spec_json on the server (PROTOCOL.md "Reward test").
  RewardTestResult reward_test(const RewardTestRequest& request);
  /// The reward plugins the server's reward host finds, sorted by name.
  RewardPluginsReply reward_plugins();
  /// Makes the server rescan its plugin folders (new .so files), then lists the plugins.
  RewardPluginsReply plugin_rescan();
  /// The server's built-in prompt datasets with `examples` (0..20) first train rows each.
  DatasetsReply datasets(uint32_t examples = 3);
  /// sample() that streams: `on_delta` gets each sequence's new tokens, logprobs and text
  /// pieces (one per token, SampleDeltaMsg::pieces) as the server produces them; blocks until
  /// the final message and returns exactly what sample() returns for the same request.
  SampleResult sample_stream(
      const std::string& address, std::span<const int32_t> prompt, int32_t num_samples,
      const SamplingParamsMsg& params,
      const std::function<void(uint32_t sequence, std::span<const int32_t> tokens,
                               std::span<const float> logprobs,
                               std::span<const std::string> pieces)>& on_delta);

  /// Builds the request body and frames of a forward/forward_backward call (exposed for tests
  /// and for callers using send()).
  static ForwardBackwardRequest make_forward_backward(const std::string& session_id,
                                                      const std::vector<Datum>& data,
                                                      const std::string& loss_fn,
                                                      const std::vector<NamedValue>& config,
                                                      Frames& frames);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spindle::protocol
