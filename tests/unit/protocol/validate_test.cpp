// validate_request: each rule, with the code and the field path in the message.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "message_samples.h"

namespace spindle::protocol {
namespace {

using testing::sample_request;

// Applies `edit` to a valid request of `op` and returns the validation error.
ProtocolError invalid(Op op, const std::function<void(Request&)>& edit, const Limits& l = {}) {
  Request r = sample_request(op);
  edit(r);
  try {
    validate_request(r, l);
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.request_id, r.request_id);
    EXPECT_EQ(e.op, op);
    return e;
  }
  ADD_FAILURE() << "validated";
  return ProtocolError("none", "none");
}

#define EXPECT_INVALID(op, wire_code, text, edit, ...)                                \
  do {                                                                                \
    const ProtocolError e_ = invalid(op, edit __VA_OPT__(, ) __VA_ARGS__);            \
    EXPECT_EQ(e_.code(), wire_code) << e_.what();                                     \
    EXPECT_NE(std::string(e_.what()).find(text), std::string::npos) << e_.what();     \
  } while (0)

template <class T>
T& body(Request& r) {
  return std::get<T>(r.body);
}
ForwardBackwardRequest& fb(Request& r) { return body<ForwardBackwardRequest>(r); }

TEST(Validate, EverySampleIsValid) {
  for (int i = 0; i < kOpCount; ++i) EXPECT_NO_THROW(validate_request(sample_request(Op(i)), {}));
}

TEST(Validate, TensorFrames) {
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "prompt: frame 5 does not exist",
                 [](Request& r) { body<SampleRequest>(r).prompt.frame = 5; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "unknown dtype 'int64'",
                 [](Request& r) { body<SampleRequest>(r).prompt.dtype = "int64"; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "prompt: dtype float32, expected int32",
                 [](Request& r) {
                   body<SampleRequest>(r).prompt.dtype = "float32";
                 });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "frame 0 has 20 bytes",
                 [](Request& r) { body<SampleRequest>(r).prompt.shape = {6}; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "negative dimension",
                 [](Request& r) { body<SampleRequest>(r).prompt.shape = {-5}; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "expected a 1-D tensor",
                 [](Request& r) { body<SampleRequest>(r).prompt.shape = {5, 1}; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "shape overflows", [](Request& r) {
    body<SampleRequest>(r).prompt.shape = {int64_t(1) << 40, int64_t(1) << 40};
  });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "frame 1 is not referenced",
                 [](Request& r) { r.frames.push_back("xxxx"); });
  EXPECT_INVALID(Op::import_peft, errc::invalid_argument, "adapter_model: dtype int32",
                 [](Request& r) {
                   auto& b = body<ImportPeftRequest>(r);
                   b.adapter_model.dtype = "int32";
                   b.adapter_model.shape = {0};
                   r.frames[0].clear();
                 });
}

TEST(Validate, ForwardBackwardData) {
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument,
                 "data[1].loss_fn_inputs.weights: 4 values, model_input has 5", [](Request& r) {
                   TensorRef& w = fb(r).data[1].loss_fn_inputs[1].tensor;
                   w.shape = {4};
                   r.frames[w.frame].resize(16);
                 });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "data[0].loss_fn_inputs.rewards",
                 [](Request& r) { fb(r).data[0].loss_fn_inputs[1].name = "rewards"; });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "given twice",
                 [](Request& r) { fb(r).data[0].loss_fn_inputs[2].name = "weights"; });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "target_tokens missing",
                 [](Request& r) {
                   auto& in = fb(r).data[0].loss_fn_inputs;
                   r.frames.erase(r.frames.begin() + in[0].tensor.frame);
                   in.erase(in.begin());
                   // renumber frames after the removed one
                   for (auto& d : fb(r).data) {
                     if (d.model_input.frame > 1) --d.model_input.frame;
                     for (auto& t : d.loss_fn_inputs)
                       if (t.tensor.frame > 1) --t.tensor.frame;
                   }
                 });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "advantages missing (loss ppo",
                 [](Request& r) {
                   auto& in = fb(r).data[1].loss_fn_inputs;
                   const uint32_t frame = in.back().tensor.frame;  // the last frame
                   in.pop_back();
                   r.frames.erase(r.frames.begin() + frame);
                 });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "data[0].loss_fn_inputs.logprobs: value 2",
                 [](Request& r) {
                   const float nan = std::nanf("");
                   std::memcpy(r.frames[fb(r).data[0].loss_fn_inputs[2].tensor.frame].data() + 8,
                               &nan, 4);
                 });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "data[0].model_input: dtype float32",
                 [](Request& r) { fb(r).data[0].model_input.dtype = "float32"; });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "loss_fn: unknown loss 'sft'",
                 [](Request& r) { fb(r).loss_fn = "sft"; });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "loss_fn_config.gamma",
                 [](Request& r) { fb(r).loss_fn_config[0].name = "gamma"; });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "loss_fn_config[1].value: not a finite",
                 [](Request& r) { fb(r).loss_fn_config[1].value = INFINITY; });
  EXPECT_INVALID(Op::forward_backward, errc::invalid_argument, "data: 0 is below 1", [](Request& r) {
    fb(r).data.clear();
    r.frames.clear();
  });
  Limits l;
  l.max_batch = 1;
  EXPECT_INVALID(Op::forward_backward, errc::limit_exceeded, "data: 2 exceeds the limit 1",
                 [](Request&) {}, l);
  l = Limits{};
  l.max_tokens_per_request = 8;  // 4 + 5 tokens
  EXPECT_INVALID(Op::forward_backward, errc::limit_exceeded, "data: 9 tokens, limit 8",
                 [](Request&) {}, l);
  // cross_entropy needs neither logprobs nor advantages.
  Request r = sample_request(Op::forward);
  EXPECT_NO_THROW(validate_request(r, {}));
}

TEST(Validate, Sampling) {
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "num_samples: 0 is below 1",
                 [](Request& r) { body<SampleRequest>(r).num_samples = 0; });
  Limits l;
  l.max_num_samples = 3;
  EXPECT_INVALID(Op::sample, errc::limit_exceeded, "num_samples: 4 exceeds the limit 3",
                 [](Request&) {}, l);
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "sampling_params.max_tokens: -1",
                 [](Request& r) { body<SampleRequest>(r).sampling_params.max_tokens = -1; });
  l = Limits{};
  l.max_sample_tokens = 31;
  EXPECT_INVALID(Op::sample, errc::limit_exceeded, "sampling_params.max_tokens: 32",
                 [](Request&) {}, l);
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "sampling_params.top_p",
                 [](Request& r) { body<SampleRequest>(r).sampling_params.top_p = 0.0f; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "sampling_params.temperature: not a finite",
                 [](Request& r) { body<SampleRequest>(r).sampling_params.temperature = NAN; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "sampling_params.temperature: must be >= 0",
                 [](Request& r) { body<SampleRequest>(r).sampling_params.temperature = -1.0f; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "stop_token_ids[1]",
                 [](Request& r) { body<SampleRequest>(r).sampling_params.stop_token_ids[1] = -3; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "prompt: needs at least one token",
                 [](Request& r) {
                   body<SampleRequest>(r).prompt.shape = {0};
                   r.frames[0].clear();
                 });
  EXPECT_INVALID(Op::compute_logprobs, errc::invalid_argument, "address: must not be empty",
                 [](Request& r) { body<ComputeLogprobsRequest>(r).address.clear(); });
}

TEST(Validate, TrainingAndCatalogFields) {
  EXPECT_INVALID(Op::create_training, errc::invalid_argument, "rank: 0 is below 1",
                 [](Request& r) { body<CreateTrainingRequest>(r).rank = 0; });
  EXPECT_INVALID(Op::create_training, errc::limit_exceeded, "rank: 512 exceeds the limit 256",
                 [](Request& r) { body<CreateTrainingRequest>(r).rank = 512; });
  EXPECT_INVALID(Op::create_training, errc::invalid_argument, "alpha: not a finite",
                 [](Request& r) { body<CreateTrainingRequest>(r).alpha = -INFINITY; });
  EXPECT_INVALID(Op::create_training, errc::invalid_argument, "nothing to train", [](Request& r) {
    auto& b = body<CreateTrainingRequest>(r);
    b.train_attn = b.train_mlp = b.train_unembed = false;
  });
  EXPECT_INVALID(Op::optim_step, errc::invalid_argument, "adam_params.beta2",
                 [](Request& r) { body<OptimStepRequest>(r).adam_params.beta2 = 1.0f; });
  EXPECT_INVALID(Op::optim_step, errc::invalid_argument, "adam_params.learning_rate: not a finite",
                 [](Request& r) { body<OptimStepRequest>(r).adam_params.learning_rate = NAN; });
  EXPECT_INVALID(Op::save_weights, errc::invalid_argument, "session_id: must not be empty",
                 [](Request& r) { body<SaveRequest>(r).session_id.clear(); });
  EXPECT_INVALID(Op::catalog_list, errc::limit_exceeded, "limit: 5000 exceeds the limit 1000",
                 [](Request& r) { body<CatalogListRequest>(r).limit = 5000; });
  EXPECT_INVALID(Op::catalog_search, errc::invalid_argument, "limit: 0 is below 1",
                 [](Request& r) { body<CatalogSearchRequest>(r).limit = 0; });
  EXPECT_INVALID(Op::catalog_lineage, errc::invalid_argument, "max_ancestors",
                 [](Request& r) { body<LineageRequest>(r).max_ancestors = -1; });
  EXPECT_INVALID(Op::catalog_tag, errc::invalid_argument, "add[1]: must not be empty",
                 [](Request& r) { body<TagRequest>(r).add[1].clear(); });
}

TEST(Validate, StringSizes) {
  Limits l;
  l.max_string_bytes = 16;
  EXPECT_INVALID(Op::catalog_fork, errc::limit_exceeded, "address: 22 bytes, limit 16",
                 [](Request&) {}, l);
  EXPECT_INVALID(Op::catalog_search, errc::limit_exceeded, "token",
                 [](Request& r) { r.token = std::string(17, 't'); }, l);
  // The PEFT config may be as large as a header.
  Request r = sample_request(Op::import_peft);
  body<ImportPeftRequest>(r).adapter_config_json = std::string(100, ' ') + "{}";
  body<ImportPeftRequest>(r).description.clear();
  body<ImportPeftRequest>(r).name = "n";
  r.token.clear();
  EXPECT_NO_THROW(validate_request(r, l));
}

TEST(Validate, BodyMustMatchOp) {
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "not the body of op sample",
                 [](Request& r) { r.body = Empty{}; });
}

}  // namespace
}  // namespace spindle::protocol

namespace spindle::protocol {
namespace {

// Issue 15's fields: each bound names its field and the limit.
TEST(Validate, TinkerFields) {
  Request zero = sample_request(Op::sample);
  std::get<SampleRequest>(zero.body).sampling_params.max_tokens = 0;  // Tinker's None
  EXPECT_NO_THROW(validate_request(zero, {}));
  EXPECT_INVALID(Op::sample, errc::limit_exceeded, "topk_prompt_logprobs: 21 exceeds the limit 20",
                 [](Request& r) { body<SampleRequest>(r).topk_prompt_logprobs = 21; });
  EXPECT_INVALID(Op::sample, errc::invalid_argument, "topk_prompt_logprobs: -1 is below 0",
                 [](Request& r) { body<SampleRequest>(r).topk_prompt_logprobs = -1; });
  EXPECT_INVALID(Op::sample_stream, errc::invalid_argument, "served by op sample only",
                 [](Request& r) { body<SampleRequest>(r).include_prompt_logprobs = true; });
  EXPECT_INVALID(Op::save_weights, errc::limit_exceeded, "ttl_seconds (0 = durable): 2592001",
                 [](Request& r) { body<SaveRequest>(r).ttl_seconds = 30 * 24 * 3600 + 1; });
  EXPECT_INVALID(Op::save_state, errc::invalid_argument, "ttl_seconds (0 = durable): -1 is below 0",
                 [](Request& r) { body<SaveRequest>(r).ttl_seconds = -1; });
  EXPECT_INVALID(Op::create_training, errc::invalid_argument, "user_metadata_json: longer than 16384",
                 [](Request& r) {
                   body<CreateTrainingRequest>(r).user_metadata_json = std::string(16385, 'x');
                 });
  EXPECT_INVALID(Op::create_training_from_state, errc::invalid_argument,
                 "policy: names a fork: needs fork = true",
                 [](Request& r) { body<CreateTrainingFromStateRequest>(r).fork = false; });
  EXPECT_INVALID(Op::detokenize, errc::invalid_argument, "tokens: dtype float32, expected int32",
                 [](Request& r) { body<DetokenizeRequest>(r).tokens.dtype = "float32"; });
  EXPECT_INVALID(Op::heartbeat, errc::limit_exceeded, "session_ids: 1025 exceeds the limit 1024",
                 [](Request& r) {
                   body<HeartbeatRequest>(r).session_ids.assign(1025, "s-1");
                 });
}

TEST(Validate, RewardTestTakesMaxTokensZeroAsSampleDoes) {
  Request r = sample_request(Op::reward_test);
  std::get<RewardTestRequest>(r.body).sampling_params.max_tokens = 0;
  EXPECT_NO_THROW(validate_request(r, {}));
}

}  // namespace
}  // namespace spindle::protocol
