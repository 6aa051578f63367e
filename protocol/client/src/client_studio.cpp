// Typed helpers of Client for the Studio's ops (messages_studio.h): plugin and dataset listings
// and the streaming sample.

#include "client_decode.h"

namespace spindle::protocol {

using namespace client_detail;

RewardPluginsReply Client::reward_plugins() {
  return body_of<RewardPluginsReply>(call(Op::reward_plugins, Empty{}));
}

RewardPluginsReply Client::plugin_rescan() {
  return body_of<RewardPluginsReply>(call(Op::plugin_rescan, Empty{}));
}

DatasetsReply Client::datasets(uint32_t examples) {
  return body_of<DatasetsReply>(call(Op::datasets, DatasetsRequest{examples}));
}

SampleResult Client::sample_stream(
    const std::string& address, std::span<const int32_t> prompt, int32_t num_samples,
    const SamplingParamsMsg& params,
    const std::function<void(uint32_t, std::span<const int32_t>, std::span<const float>,
                             std::span<const std::string>)>& on_delta) {
  Frames frames;
  SampleRequest req;
  req.address = address;
  req.prompt = add_tensor(frames, prompt);
  req.num_samples = num_samples;
  req.sampling_params = params;
  auto on_message = [&](const Reply& m) {
    const auto* body = std::get_if<SampleStreamReply>(&m.body);
    if (!body) throw ClientError(errc::bad_request, "sample_stream: wrong body type", m.request_id);
    for (size_t i = 0; i < body->deltas.size(); ++i) {
      const SampleDeltaMsg& d = body->deltas[i];
      const auto [tokens, logprobs] = decoded(m, [&] {
        return std::pair(read_int32(d.tokens, m.frames, at("deltas", i) + ".tokens"),
                         read_float32(d.logprobs, m.frames, at("deltas", i) + ".logprobs"));
      });
      if (d.pieces.size() != tokens.size()) {
        throw ClientError(errc::bad_request,
                          "sample_stream: " + at("deltas", i) + " has " +
                              std::to_string(d.pieces.size()) + " pieces for " +
                              std::to_string(tokens.size()) + " tokens",
                          m.request_id);
      }
      if (on_delta) on_delta(d.sequence, tokens, logprobs, d.pieces);
    }
  };
  Reply r = call_stream(Op::sample_stream, std::move(req), std::move(frames), on_message);
  const auto* body = std::get_if<SampleStreamReply>(&r.body);
  if (!body) throw ClientError(errc::bad_request, "sample_stream: wrong body type", r.request_id);
  return sample_result(r, body->revision_id, body->sequences);
}

}  // namespace spindle::protocol
