// Op names, the body type of each op, and small constructors of wire.h.

#include <array>

#include "spindle/protocol/wire.h"

namespace spindle::protocol {

namespace {

struct OpEntry {
  Op op;
  const char* name;
};

constexpr std::array<OpEntry, kOpCount> kOps = {{
    {Op::handshake, "handshake"},
    {Op::capabilities, "capabilities"},
    {Op::status, "status"},
    {Op::create_training, "create_training"},
    {Op::create_training_from_state, "create_training_from_state"},
    {Op::forward, "forward"},
    {Op::forward_backward, "forward_backward"},
    {Op::optim_step, "optim_step"},
    {Op::save_weights, "save_weights"},
    {Op::save_state, "save_state"},
    {Op::load_state, "load_state"},
    {Op::close_training, "close_training"},
    {Op::sample, "sample"},
    {Op::compute_logprobs, "compute_logprobs"},
    {Op::catalog_list, "catalog_list"},
    {Op::catalog_search, "catalog_search"},
    {Op::catalog_show, "catalog_show"},
    {Op::catalog_lineage, "catalog_lineage"},
    {Op::catalog_fork, "catalog_fork"},
    {Op::catalog_rollback, "catalog_rollback"},
    {Op::catalog_tag, "catalog_tag"},
    {Op::catalog_delete, "catalog_delete"},
    {Op::import_peft, "import_peft"},
    {Op::export_peft, "export_peft"},
    {Op::tokenize, "tokenize"},
    {Op::run_start, "run_start"},
    {Op::run_list, "run_list"},
    {Op::run_status, "run_status"},
    {Op::run_stop, "run_stop"},
    {Op::run_resume, "run_resume"},
    {Op::reward_test, "reward_test"},
    {Op::reward_plugins, "reward_plugins"},
    {Op::plugin_rescan, "plugin_rescan"},
    {Op::datasets, "datasets"},
    {Op::sample_stream, "sample_stream"},
    {Op::subscribe, "subscribe"},
    {Op::unsubscribe, "unsubscribe"},
    {Op::detokenize, "detokenize"},
    {Op::tokenizer_info, "tokenizer_info"},
    {Op::heartbeat, "heartbeat"},
    {Op::catalog_promote, "catalog_promote"},
    {Op::cluster_status, "cluster_status"},
}};

constexpr bool table_in_enum_order() {
  for (int i = 0; i < kOpCount; ++i)
    if (int(kOps[size_t(i)].op) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kOps must list every Op in enum order");

}  // namespace

const char* op_name(Op op) {
  const auto i = size_t(op);
  return i < kOps.size() ? kOps[i].name : "?";
}

std::optional<Op> op_from_name(std::string_view name) {
  for (const OpEntry& e : kOps)
    if (name == e.name) return e.op;
  return std::nullopt;
}

RequestBody empty_request_body(Op op) {
  switch (op) {
    case Op::handshake: return HandshakeRequest{};
    case Op::capabilities:
    case Op::status: return Empty{};
    case Op::create_training: return CreateTrainingRequest{};
    case Op::create_training_from_state: return CreateTrainingFromStateRequest{};
    case Op::forward:
    case Op::forward_backward: return ForwardBackwardRequest{};
    case Op::optim_step: return OptimStepRequest{};
    case Op::save_weights:
    case Op::save_state: return SaveRequest{};
    case Op::load_state: return LoadStateRequest{};
    case Op::close_training: return SessionRequest{};
    case Op::sample: return SampleRequest{};
    case Op::compute_logprobs: return ComputeLogprobsRequest{};
    case Op::catalog_list: return CatalogListRequest{};
    case Op::catalog_search: return CatalogSearchRequest{};
    case Op::catalog_show:
    case Op::catalog_rollback:
    case Op::catalog_delete:
    case Op::export_peft: return AddressRequest{};
    case Op::catalog_lineage: return LineageRequest{};
    case Op::catalog_fork: return ForkRequest{};
    case Op::catalog_tag: return TagRequest{};
    case Op::import_peft: return ImportPeftRequest{};
    case Op::tokenize: return TokenizeRequest{};
    case Op::run_start: return RunStartRequest{};
    case Op::run_list: return RunListRequest{};
    case Op::run_status: return RunStatusRequest{};
    case Op::run_stop: return RunIdRequest{};
    case Op::run_resume: return RunIdRequest{};
    case Op::reward_test: return RewardTestRequest{};
    case Op::reward_plugins:
    case Op::plugin_rescan: return Empty{};
    case Op::datasets: return DatasetsRequest{};
    case Op::sample_stream: return SampleRequest{};
    case Op::subscribe: return SubscribeRequest{};
    case Op::unsubscribe: return UnsubscribeRequest{};
    case Op::detokenize: return DetokenizeRequest{};
    case Op::tokenizer_info: return TokenizerInfoRequest{};
    case Op::heartbeat: return HeartbeatRequest{};
    case Op::catalog_promote: return AddressRequest{};
    case Op::cluster_status: return Empty{};
  }
  throw ProtocolError(errc::internal, "empty_request_body: op " + std::to_string(int(op)));
}

ReplyBody empty_reply_body(Op op) {
  switch (op) {
    case Op::handshake: return HandshakeReply{};
    case Op::capabilities: return CapabilitiesReply{};
    case Op::status: return StatusReply{};
    case Op::create_training:
    case Op::create_training_from_state:
    case Op::load_state: return TrainingSessionReply{};
    case Op::forward:
    case Op::forward_backward: return ForwardBackwardReply{};
    case Op::optim_step: return OptimStepReply{};
    case Op::save_weights:
    case Op::save_state: return SaveReply{};
    case Op::close_training:
    case Op::catalog_delete: return Empty{};
    case Op::sample: return SampleReply{};
    case Op::compute_logprobs: return ComputeLogprobsReply{};
    case Op::catalog_list:
    case Op::catalog_search: return PolicyListReply{};
    case Op::catalog_show:
    case Op::catalog_fork:
    case Op::catalog_rollback:
    case Op::catalog_tag:
    case Op::import_peft: return PolicyReply{};
    case Op::catalog_lineage: return LineageReply{};
    case Op::export_peft: return ExportPeftReply{};
    case Op::tokenize: return TokenizeReply{};
    case Op::run_start: return RunStartReply{};
    case Op::run_list: return RunListReply{};
    case Op::run_status: return RunStatusReply{};
    case Op::run_stop: return RunStatusReply{};
    case Op::run_resume: return RunStatusReply{};
    case Op::reward_test: return RewardTestReply{};
    case Op::reward_plugins:
    case Op::plugin_rescan: return RewardPluginsReply{};
    case Op::datasets: return DatasetsReply{};
    case Op::sample_stream: return SampleStreamReply{};
    case Op::subscribe: return EventReply{};
    case Op::unsubscribe: return Empty{};
    case Op::detokenize: return DetokenizeReply{};
    case Op::tokenizer_info: return TokenizerInfoReply{};
    case Op::heartbeat: return HeartbeatReply{};
    case Op::catalog_promote: return PolicyReply{};
    case Op::cluster_status: return ClusterStatusReply{};
  }
  throw ProtocolError(errc::internal, "empty_reply_body: op " + std::to_string(int(op)));
}

bool is_stream_op(Op op) { return op == Op::sample_stream || op == Op::subscribe; }

bool is_final_reply(const Reply& reply) {
  if (!reply.ok || reply.op_unknown || !is_stream_op(reply.op)) return true;
  if (const auto* s = std::get_if<SampleStreamReply>(&reply.body)) return s->final;
  if (const auto* e = std::get_if<EventReply>(&reply.body)) return e->final;
  return true;
}

LimitsInfo Limits::info() const {
  LimitsInfo i;
  i.max_frame_bytes = max_frame_bytes;
  i.max_frames = max_frames;
  i.max_batch = max_batch;
  i.max_tokens_per_request = max_tokens_per_request;
  i.max_num_samples = max_num_samples;
  i.max_sample_tokens = max_sample_tokens;
  i.max_rank = max_rank;
  return i;
}

Reply make_error_reply(Encoding encoding, uint64_t request_id, Op op, std::string code,
                       std::string message) {
  Reply r;
  r.encoding = encoding;
  r.request_id = request_id;
  r.op = op;
  r.ok = false;
  r.error.code = std::move(code);
  r.error.message = std::move(message);
  r.body = Empty{};
  return r;
}

Reply make_error_reply(const ProtocolError& error) {
  Reply r = make_error_reply(error.encoding.value_or(Encoding::binary), error.request_id,
                             error.op.value_or(Op::handshake), error.code(), error.what());
  r.op_unknown = !error.op.has_value();
  return r;
}

}  // namespace spindle::protocol
