// Typed helpers of Client: request bodies and tensor frames in, decoded results out.

#include "client_decode.h"

namespace spindle::protocol {

using namespace client_detail;

double ForwardBackwardResult::metric(std::string_view name) const {
  for (const NamedValue& m : metrics)
    if (m.name == name) return m.value;
  throw ClientError(errc::not_found, "no metric '" + std::string(name) + "'");
}

ForwardBackwardRequest Client::make_forward_backward(const std::string& session_id,
                                                     const std::vector<Datum>& data,
                                                     const std::string& loss_fn,
                                                     const std::vector<NamedValue>& config,
                                                     Frames& frames) {
  ForwardBackwardRequest b;
  b.session_id = session_id;
  b.loss_fn = loss_fn;
  b.loss_fn_config = config;
  for (const Datum& d : data) {
    DatumMsg m;
    m.model_input = add_tensor(frames, std::span<const int32_t>(d.model_input));
    m.loss_fn_inputs.push_back(
        {"target_tokens", add_tensor(frames, std::span<const int32_t>(d.target_tokens))});
    const std::pair<const char*, const std::vector<float>*> floats[] = {
        {"weights", &d.weights}, {"logprobs", &d.logprobs}, {"advantages", &d.advantages}};
    for (const auto& [name, values] : floats)
      if (!values->empty())
        m.loss_fn_inputs.push_back({name, add_tensor(frames, std::span<const float>(*values))});
    b.data.push_back(std::move(m));
  }
  return b;
}

static ForwardBackwardResult run_forward(Client& c, Op op, const std::string& session_id,
                                         const std::vector<Datum>& data,
                                         const std::string& loss_fn,
                                         const std::vector<NamedValue>& config) {
  Frames frames;
  ForwardBackwardRequest b = Client::make_forward_backward(session_id, data, loss_fn, config, frames);
  Reply r = c.call(op, std::move(b), std::move(frames));
  const Frames reply_frames = std::move(r.frames);
  const uint64_t id = r.request_id;
  ForwardBackwardReply body = body_of<ForwardBackwardReply>(std::move(r));
  ForwardBackwardResult out;
  out.metrics = std::move(body.metrics);
  for (size_t i = 0; i < body.loss_fn_outputs.size(); ++i) {
    std::vector<float> lp;
    for (const NamedTensor& t : body.loss_fn_outputs[i]) {
      if (t.name != "logprobs") continue;
      try {
        lp = read_float32(t.tensor, reply_frames, at("loss_fn_outputs", i) + ".logprobs");
      } catch (const ProtocolError& e) {
        throw ClientError(e.code(), std::string("reply: ") + e.what(), id);
      }
    }
    out.logprobs.push_back(std::move(lp));
  }
  return out;
}

CapabilitiesReply Client::capabilities() { return body_of<CapabilitiesReply>(call(Op::capabilities, Empty{})); }

StatusReply Client::status() { return body_of<StatusReply>(call(Op::status, Empty{})); }

ClusterStatusReply Client::cluster_status() {
  return body_of<ClusterStatusReply>(call(Op::cluster_status, Empty{}));
}

TrainingSessionReply Client::create_training(const CreateTrainingRequest& request) {
  return body_of<TrainingSessionReply>(call(Op::create_training, request));
}

TrainingSessionReply Client::create_training_from_state(const std::string& address) {
  CreateTrainingFromStateRequest req;
  req.address = address;
  return body_of<TrainingSessionReply>(call(Op::create_training_from_state, std::move(req)));
}

ForwardBackwardResult Client::forward(const std::string& session_id, const std::vector<Datum>& data,
                                      const std::string& loss_fn,
                                      const std::vector<NamedValue>& loss_fn_config) {
  return run_forward(*this, Op::forward, session_id, data, loss_fn, loss_fn_config);
}

ForwardBackwardResult Client::forward_backward(const std::string& session_id,
                                               const std::vector<Datum>& data,
                                               const std::string& loss_fn,
                                               const std::vector<NamedValue>& loss_fn_config) {
  return run_forward(*this, Op::forward_backward, session_id, data, loss_fn, loss_fn_config);
}

OptimStepReply Client::optim_step(const std::string& session_id, const AdamParamsMsg& adam) {
  return body_of<OptimStepReply>(call(Op::optim_step, OptimStepRequest{session_id, adam}));
}

SaveReply Client::save_weights(const std::string& session_id, const std::string& name,
                               const std::string& metrics_json) {
  return body_of<SaveReply>(call(Op::save_weights, SaveRequest{session_id, name, metrics_json}));
}

SaveReply Client::save_state(const std::string& session_id, const std::string& name,
                             const std::string& metrics_json) {
  return body_of<SaveReply>(call(Op::save_state, SaveRequest{session_id, name, metrics_json}));
}

TrainingSessionReply Client::load_state(const std::string& session_id, const std::string& address) {
  return body_of<TrainingSessionReply>(call(Op::load_state, LoadStateRequest{session_id, address}));
}

void Client::close_training(const std::string& session_id) {
  call(Op::close_training, SessionRequest{session_id});
}

SampleResult Client::sample(const std::string& address, std::span<const int32_t> prompt,
                            int32_t num_samples, const SamplingParamsMsg& params) {
  Frames frames;
  SampleRequest req;
  req.address = address;
  req.prompt = add_tensor(frames, prompt);
  req.num_samples = num_samples;
  req.sampling_params = params;
  Reply r = call(Op::sample, std::move(req), std::move(frames));
  const SampleReply& body = std::get<SampleReply>(r.body);
  return sample_result(r, body.revision_id, body.sequences);
}

LogprobsResult Client::compute_logprobs(const std::string& address, std::span<const int32_t> prompt) {
  Frames frames;
  ComputeLogprobsRequest req;
  req.address = address;
  req.prompt = add_tensor(frames, prompt);
  Reply r = call(Op::compute_logprobs, std::move(req), std::move(frames));
  return decoded(r, [&] {
    const auto& body = std::get<ComputeLogprobsReply>(r.body);
    return LogprobsResult{body.revision_id, read_float32(body.logprobs, r.frames, "logprobs")};
  });
}

PolicyListReply Client::catalog_list(const CatalogListRequest& request) {
  return body_of<PolicyListReply>(call(Op::catalog_list, request));
}

PolicyListReply Client::catalog_search(const std::string& text, uint32_t limit) {
  return body_of<PolicyListReply>(call(Op::catalog_search, CatalogSearchRequest{text, limit}));
}

PolicyReply Client::catalog_show(const std::string& address) {
  return body_of<PolicyReply>(call(Op::catalog_show, AddressRequest{address}));
}

LineageReply Client::catalog_lineage(const std::string& address, int32_t max_ancestors,
                                     int32_t max_descendants) {
  return body_of<LineageReply>(
      call(Op::catalog_lineage, LineageRequest{address, max_ancestors, max_descendants}));
}

PolicyReply Client::catalog_fork(const std::string& address, const std::string& name) {
  return body_of<PolicyReply>(call(Op::catalog_fork, ForkRequest{address, name}));
}

PolicyReply Client::catalog_rollback(const std::string& address) {
  return body_of<PolicyReply>(call(Op::catalog_rollback, AddressRequest{address}));
}

PolicyReply Client::catalog_tag(const std::string& address, const std::vector<std::string>& add,
                                const std::vector<std::string>& remove) {
  return body_of<PolicyReply>(call(Op::catalog_tag, TagRequest{address, add, remove}));
}

void Client::catalog_delete(const std::string& address) {
  call(Op::catalog_delete, AddressRequest{address});
}

PolicyReply Client::import_peft(const std::string& name, const std::string& base_id,
                                const std::string& adapter_config_json,
                                std::string_view adapter_model, const std::string& description) {
  Frames frames;
  ImportPeftRequest req;
  req.name = name;
  req.base_id = base_id;
  req.adapter_config_json = adapter_config_json;
  req.adapter_model = add_bytes(frames, adapter_model);
  req.description = description;
  return body_of<PolicyReply>(call(Op::import_peft, std::move(req), std::move(frames)));
}

ExportedPeft Client::export_peft(const std::string& address) {
  Reply r = call(Op::export_peft, AddressRequest{address});
  return decoded(r, [&] {
    const auto& body = std::get<ExportPeftReply>(r.body);
    return ExportedPeft{body.revision_id, body.adapter_config_json,
                        std::string(read_bytes(body.adapter_model, r.frames, "adapter_model"))};
  });
}

std::vector<int32_t> Client::tokenize(const std::string& text, bool add_special_tokens,
                                      const std::string& base_model) {
  Reply r = call(Op::tokenize, TokenizeRequest{base_model, text, add_special_tokens});
  return decoded(r, [&] {
    return read_int32(std::get<TokenizeReply>(r.body).tokens, r.frames, "tokens");
  });
}

RunStartReply Client::run_start(const std::string& config_json, bool resume) {
  return body_of<RunStartReply>(call(Op::run_start, RunStartRequest{config_json, resume}));
}

RunListReply Client::run_list(uint32_t limit, const std::string& cursor) {
  return body_of<RunListReply>(call(Op::run_list, RunListRequest{limit, cursor}));
}

RunStatusReply Client::run_status(const std::string& run_id, int64_t metrics_since_step) {
  return body_of<RunStatusReply>(call(Op::run_status, RunStatusRequest{run_id, metrics_since_step}));
}

RunStatusReply Client::run_stop(const std::string& run_id) {
  return body_of<RunStatusReply>(call(Op::run_stop, RunIdRequest{run_id}));
}

RunStatusReply Client::run_resume(const std::string& run_id) {
  return body_of<RunStatusReply>(call(Op::run_resume, RunIdRequest{run_id}));
}

RewardTestResult Client::reward_test(const RewardTestRequest& request) {
  Reply r = call(Op::reward_test, request);
  return decoded(r, [&] {
    RewardTestReply& body = std::get<RewardTestReply>(r.body);
    RewardTestResult out;
    out.revision_id = std::move(body.revision_id);
    out.terms = std::move(body.terms);
    out.total = std::move(body.total);
    for (size_t i = 0; i < body.samples.size(); ++i) {
      RewardSampleInfo& s = body.samples[i];
      out.samples.push_back({s.row, read_int32(s.tokens, r.frames, at("samples", i) + ".tokens"),
                             std::move(s.text), std::move(s.stop_reason), std::move(s.scores),
                             std::move(s.infos), s.total});
    }
    return out;
  });
}

}  // namespace spindle::protocol
