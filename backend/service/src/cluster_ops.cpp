// The worker's side of forwarded requests, and the forward encoding both sides share
// (cluster_wire.h, docs/cluster.md).

#include "cluster_ops.h"

#include "engine_ops.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/core/error.h"

namespace spindle::service {

using namespace protocol;

Frames encode_forwarded(Request request) {
  request.token.clear();  // the worker trusts the coordinator's tenant, not tokens
  Frames out;
  out.reserve(1 + request.frames.size());
  out.push_back(encode_request_header(request));
  for (std::string& f : request.frames) out.push_back(std::move(f));
  return out;
}

Forward sampling_forward(const Call& call, const ResolvedAdapter& adapter, std::string key,
                         Request request) {
  Forward f;
  f.call = call;
  f.base = adapter.base->id;
  f.policy_key = std::move(key);
  f.header.tenant = call.tenant;
  f.header.base = adapter.base->id;
  f.header.revision_id = adapter.revision_id;
  f.header.blob = adapter.blob;
  f.request = encode_forwarded(std::move(request));
  return f;
}

void dispatch_forwarded(Daemon& d, Call call, Request request, cluster_wire::ForwardHeader header) {
  try {
    if (header.kind == cluster_wire::ForwardKind::session_sample) {
      SPINDLE_CHECK(request.op == Op::sample, invalid_argument,
                    "a session_sample forward carries a sample request, not {}",
                    op_name(request.op));
      return submit_session_sampling(d, call, request, header.session_id);
    }
    if (header.kind != cluster_wire::ForwardKind::request) {
      return dispatch_forwarded_session(d, call, header);
    }
    switch (request.op) {
      case Op::sample:
      case Op::sample_stream:
      case Op::compute_logprobs: {
        ServedBase& base = d.base(header.base);
        return submit_sampling(d, call, request, {&base, header.revision_id, header.blob});
      }
      case Op::forward:
      case Op::forward_backward:
      case Op::optim_step:
      case Op::close_training: return dispatch_training_op(d, std::move(call), std::move(request));
      default:
        SPINDLE_THROW(unsupported, "a worker does not serve {} (the coordinator does)",
                      op_name(request.op));
    }
  } catch (const std::exception& e) {
    reply_exception(d, call, e);
  }
}

adapters::LoadFn worker_load_fn(Daemon& d, const engine::ModelConfig& base,
                                std::shared_ptr<const adapters::BlobStore> shared) {
  return [&d, base, shared](const std::string& blob) -> adapters::AdapterPtr {
    const std::string source = fmt::format("revision blob {}", blob);
    auto decoded = [&](const std::string& bytes) {
      adapters::DecodedRevision rev = adapters::decode_revision(bytes, source);
      rev.weights.validate(base, source);
      return std::make_shared<const engine::LoraWeights>(std::move(rev.weights));
    };
    const adapters::BlobStore* stores[] = {d.blobs.get(), shared.get()};
    for (const adapters::BlobStore* store : stores) {
      if (!store) continue;
      try {
        return decoded(store->get(blob));
      } catch (const Error& e) {
        if (e.code() != ErrorCode::not_found) throw;
      }
    }
    const std::string bytes = d.cluster->fetch_blob(blob, *d.replies, std::chrono::seconds(60));
    const std::string stored = d.blobs->put(bytes);  // the worker's cache of fetched blobs
    SPINDLE_CHECK(stored == blob, data_loss,
                  "blob {} from the coordinator hashes to {}: damaged in transit, not used", blob,
                  stored);
    return decoded(bytes);
  };
}

}  // namespace spindle::service
