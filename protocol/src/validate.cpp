// validate_request (wire.h): what the server checks before a request reaches a queue.
// A generic pass over every field (strings, numbers, tensor frames), then per-op rules.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "spindle/protocol/wire.h"
#include "utf8.h"
#include "walker.h"

namespace spindle::protocol {

namespace {

constexpr uint32_t kMaxCatalogLimit = 1000;
constexpr uint32_t kMaxHistogramBins = 1000;
constexpr int32_t kMaxTopkPromptLogprobs = 20;
constexpr int64_t kMaxTtlSeconds = 30ll * 24 * 3600;  // 30 days
constexpr size_t kMaxUserMetadataBytes = 16384;
constexpr int64_t kMaxDataParallel = 64;  // create_training*'s data_parallel
constexpr const char* kLossFns[] = {"cross_entropy", "importance_sampling", "ppo", "cispo", "dro"};
constexpr const char* kLossConfigNames[] = {"clip_low_threshold", "clip_high_threshold", "beta"};

size_t itemsize(std::string_view dtype) {
  if (dtype == "int32" || dtype == "float32") return 4;
  if (dtype == "uint8") return 1;
  return 0;
}

template <size_t N>
bool one_of(std::string_view s, const char* const (&names)[N]) {
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

class Checker {
 public:
  Checker(const Request& r, const Limits& l) : r_(r), l_(l), used_(r.frames.size(), false) {}

  [[noreturn]] void fail(const char* code, const std::string& path, const std::string& why) const {
    ProtocolError e(code, path.empty() ? why : path + ": " + why);
    e.encoding = r_.encoding;
    e.request_id = r_.request_id;
    e.op = r_.op;
    throw e;
  }
  void require(bool ok, const std::string& path, const std::string& why) const {
    if (!ok) fail(errc::invalid_argument, path, why);
  }
  // lo <= v (invalid_argument) and v <= hi (limit_exceeded: a server bound).
  void bounded(int64_t v, int64_t lo, int64_t hi, const std::string& path) const {
    if (v < lo) fail(errc::invalid_argument, path, std::to_string(v) + " is below " + std::to_string(lo));
    if (v > hi)
      fail(errc::limit_exceeded, path, std::to_string(v) + " exceeds the limit " + std::to_string(hi));
  }
  void non_empty(const std::string& s, const std::string& path) const {
    require(!s.empty(), path, "must not be empty");
  }

  // Generic checks of one TensorRef (frame exists, dtype known, size agrees with the shape);
  // returns its element count.
  uint64_t tensor(const TensorRef& t, const std::string& path) {
    const size_t item = itemsize(t.dtype);
    require(item != 0, path, "unknown dtype '" + t.dtype.substr(0, 32) + "' (int32, float32, uint8)");
    require(t.frame < r_.frames.size(), path,
            "frame " + std::to_string(t.frame) + " does not exist (" +
                std::to_string(r_.frames.size()) + " frames)");
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      require(d >= 0, path, "negative dimension " + std::to_string(d));
      if (d != 0 && count > std::numeric_limits<uint64_t>::max() / uint64_t(d) / item)
        fail(errc::invalid_argument, path, "shape overflows");
      count *= uint64_t(d);
    }
    const uint64_t bytes = r_.frames[t.frame].size();
    require(count * item == bytes, path,
            "shape holds " + std::to_string(count) + " " + t.dtype + " values (" +
                std::to_string(count * item) + " bytes), frame " + std::to_string(t.frame) +
                " has " + std::to_string(bytes) + " bytes");
    used_[t.frame] = true;
    return count;
  }

  // A 1-D tensor of `dtype`; returns its length.
  int64_t vector(const TensorRef& t, const std::string& path, const char* dtype) {
    tensor(t, path);
    require(t.dtype == dtype, path, "dtype " + t.dtype + ", expected " + dtype);
    require(t.shape.size() == 1, path,
            "rank " + std::to_string(t.shape.size()) + ", expected a 1-D tensor");
    return t.shape[0];
  }

  void all_finite(const TensorRef& t, const std::string& path) const {
    const std::string& f = r_.frames[t.frame];
    for (size_t i = 0; i * 4 < f.size(); ++i) {
      float v;
      std::memcpy(&v, f.data() + i * 4, 4);
      if (!std::isfinite(v)) fail(errc::invalid_argument, path, "value " + std::to_string(i) + " is not finite");
    }
  }

  void tokens(uint64_t n, const std::string& path) const {
    if (n > l_.max_tokens_per_request)
      fail(errc::limit_exceeded, path,
           std::to_string(n) + " tokens, limit " + std::to_string(l_.max_tokens_per_request));
  }

  void all_frames_used() const {
    for (size_t i = 0; i < used_.size(); ++i)
      require(used_[i], "", "frame " + std::to_string(i) + " is not referenced by any tensor");
  }

  const Request& r_;
  const Limits& l_;

 private:
  std::vector<bool> used_;
};

// The long strings: documents and text a request carries whole (PEFT config, run config,
// reward spec, the text to tokenize). The header bound is theirs; every other string has
// max_string_bytes.
bool is_long_string(Op op, std::string_view field) {
  return field == "adapter_config_json" || field == "config_json" || field == "spec_json" ||
         (op == Op::tokenize && field == "text");
}

// Strings within bounds and valid UTF-8, finite numbers, for every field.
struct FieldChecks : detail::Walker::Visitor {
  explicit FieldChecks(Checker& c) : c(c) {}
  void string(const detail::Walker& w, std::string& s) override {
    const uint64_t limit =
        is_long_string(c.r_.op, w.field()) ? c.l_.max_header_bytes : c.l_.max_string_bytes;
    if (s.size() > limit)
      c.fail(errc::limit_exceeded, w.path(),
             std::to_string(s.size()) + " bytes, limit " + std::to_string(limit));
    // Names, addresses, JSON documents and text go to the catalog, to JSON and to other
    // clients' J replies, none of which can hold arbitrary bytes.
    if (const size_t at = detail::first_invalid_utf8(s); at != std::string::npos) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", unsigned(uint8_t(s[at])));
      c.fail(errc::invalid_argument, w.path(),
             std::string("not valid UTF-8 (byte ") + hex + " at offset " + std::to_string(at) +
                 "): every request string must be UTF-8");
    }
  }
  void number(const detail::Walker& w, double v) override {
    c.require(std::isfinite(v), w.path(), "not a finite number");
  }
  void tensor(const detail::Walker& w, const TensorRef& t) override { c.tensor(t, w.path()); }
  Checker& c;
};

// needs_sampler: the loss (named `loss`) reads the sampler's logprobs and the advantages.
void check_datum(Checker& c, const DatumMsg& d, const std::string& path, bool needs_sampler,
                 const std::string& loss) {
  const int64_t n = c.vector(d.model_input, path + ".model_input", "int32");
  std::set<std::string> seen;
  for (const NamedTensor& in : d.loss_fn_inputs) {
    const std::string p = path + ".loss_fn_inputs." + in.name.substr(0, 64);
    const bool is_int = in.name == "target_tokens";
    c.require(is_int || in.name == "weights" || in.name == "logprobs" || in.name == "advantages",
              p, "unknown loss_fn_input (target_tokens, weights, logprobs, advantages)");
    c.require(seen.insert(in.name).second, p, "given twice");
    const int64_t m = c.vector(in.tensor, p, is_int ? "int32" : "float32");
    c.require(m == n, p, std::to_string(m) + " values, model_input has " + std::to_string(n));
    if (!is_int) c.all_finite(in.tensor, p);
  }
  c.require(seen.count("target_tokens") == 1, path + ".loss_fn_inputs", "target_tokens missing");
  if (needs_sampler)
    for (const char* name : {"logprobs", "advantages"})
      c.require(seen.count(name) == 1, path + ".loss_fn_inputs",
                std::string(name) + " missing (loss " + loss + " needs it)");
}

void check(Checker& c, const ForwardBackwardRequest& b) {
  c.non_empty(b.session_id, "session_id");
  c.require(one_of(b.loss_fn, kLossFns), "loss_fn",
            "unknown loss '" + b.loss_fn.substr(0, 64) +
                "' (cross_entropy, importance_sampling, ppo, cispo, dro)");
  c.bounded(int64_t(b.data.size()), 1, c.l_.max_batch, "data");
  const bool needs_sampler = b.loss_fn != "cross_entropy";
  uint64_t total = 0;
  for (size_t i = 0; i < b.data.size(); ++i) {
    const std::string path = "data[" + std::to_string(i) + "]";
    check_datum(c, b.data[i], path, needs_sampler, b.loss_fn);
    total += uint64_t(b.data[i].model_input.shape[0]);
  }
  c.tokens(total, "data");
  std::set<std::string> seen;
  for (const NamedValue& v : b.loss_fn_config) {
    const std::string p = "loss_fn_config." + v.name.substr(0, 64);
    c.require(one_of(v.name, kLossConfigNames), p,
              "unknown (clip_low_threshold, clip_high_threshold, beta)");
    c.require(seen.insert(v.name).second, p, "given twice");
  }
}

// min_tokens: 0 where 0 means "until a stop, the context's end or the limit" (sample,
// sample_stream: Tinker's max_tokens=None), else 1.
void check_sampling(Checker& c, const SamplingParamsMsg& s, int64_t min_tokens) {
  c.bounded(s.max_tokens, min_tokens, c.l_.max_sample_tokens, "sampling_params.max_tokens");
  c.require(s.temperature >= 0.0f, "sampling_params.temperature", "must be >= 0");
  c.require(s.top_k >= 0, "sampling_params.top_k", "must be >= 0 (0 = off)");
  c.require(s.top_p > 0.0f && s.top_p <= 1.0f, "sampling_params.top_p", "must be in (0, 1]");
  for (size_t i = 0; i < s.stop_token_ids.size(); ++i)
    c.require(s.stop_token_ids[i] >= 0, "sampling_params.stop_token_ids[" + std::to_string(i) + "]",
              "must be >= 0");
  for (size_t i = 0; i < s.stop_strings.size(); ++i)
    c.non_empty(s.stop_strings[i], "sampling_params.stop_strings[" + std::to_string(i) + "]");
}

void check(Checker& c, const SampleRequest& b) {
  c.non_empty(b.address, "address");
  const int64_t n = c.vector(b.prompt, "prompt", "int32");
  c.require(n >= 1, "prompt", "needs at least one token");
  c.tokens(uint64_t(n), "prompt");
  c.bounded(b.num_samples, 1, c.l_.max_num_samples, "num_samples");
  check_sampling(c, b.sampling_params, 0);
  c.bounded(b.topk_prompt_logprobs, 0, kMaxTopkPromptLogprobs, "topk_prompt_logprobs");
  c.require(c.r_.op == Op::sample || (!b.include_prompt_logprobs && b.topk_prompt_logprobs == 0),
            "include_prompt_logprobs", "prompt logprobs are served by op sample only");
}

void check(Checker& c, const RewardTestRequest& b) {
  c.non_empty(b.spec_json, "spec_json");
  c.non_empty(b.address, "address");
  c.require(!b.rows.empty(), "rows", "needs at least one row");
  for (size_t i = 0; i < b.rows.size(); ++i)
    c.non_empty(b.rows[i].prompt, "rows[" + std::to_string(i) + "].prompt");
  c.bounded(b.num_samples, 1, c.l_.max_num_samples, "num_samples");
  const uint64_t total = uint64_t(b.rows.size()) * uint64_t(b.num_samples);
  if (total > c.l_.max_reward_test_samples)
    c.fail(errc::limit_exceeded, "rows",
           std::to_string(b.rows.size()) + " rows x " + std::to_string(b.num_samples) +
               " samples = " + std::to_string(total) + " completions, limit " +
               std::to_string(c.l_.max_reward_test_samples) + " (max_reward_test_samples)");
  check_sampling(c, b.sampling_params, 0);
  c.bounded(b.bins, 1, kMaxHistogramBins, "bins");
}

void check(Checker& c, const ComputeLogprobsRequest& b) {
  c.non_empty(b.address, "address");
  const int64_t n = c.vector(b.prompt, "prompt", "int32");
  c.require(n >= 1, "prompt", "needs at least one token");
  c.tokens(uint64_t(n), "prompt");
}

void check_user_metadata(Checker& c, const std::string& json) {
  c.require(json.size() <= kMaxUserMetadataBytes, "user_metadata_json",
            "longer than " + std::to_string(kMaxUserMetadataBytes) + " bytes");
}

void check(Checker& c, const CreateTrainingRequest& b) {
  check_user_metadata(c, b.user_metadata_json);
  c.bounded(b.data_parallel, 1, kMaxDataParallel, "data_parallel");
  c.bounded(b.rank, 1, c.l_.max_rank, "rank");
  c.require(b.alpha >= 0.0f, "alpha", "must be >= 0 (0 = rank)");
  c.require(b.train_attn || b.train_mlp || b.train_unembed, "train_attn",
            "nothing to train: train_attn, train_mlp and train_unembed are all false");
}

void check(Checker& c, const OptimStepRequest& b) {
  c.non_empty(b.session_id, "session_id");
  const AdamParamsMsg& a = b.adam_params;
  c.require(a.learning_rate >= 0.0f, "adam_params.learning_rate", "must be >= 0");
  c.require(a.beta1 >= 0.0f && a.beta1 < 1.0f, "adam_params.beta1", "must be in [0, 1)");
  c.require(a.beta2 >= 0.0f && a.beta2 < 1.0f, "adam_params.beta2", "must be in [0, 1)");
  c.require(a.eps > 0.0f, "adam_params.eps", "must be > 0");  // the optimizer divides by it
  c.require(a.weight_decay >= 0.0f, "adam_params.weight_decay", "must be >= 0");
  c.require(a.grad_clip_norm >= 0.0f, "adam_params.grad_clip_norm", "must be >= 0 (0 = off)");
}

void check(Checker& c, const CreateTrainingFromStateRequest& b) {
  c.non_empty(b.address, "address");
  c.require(b.fork || b.policy.empty(), "policy", "names a fork: needs fork = true");
  check_user_metadata(c, b.user_metadata_json);
  c.bounded(b.data_parallel, 1, kMaxDataParallel, "data_parallel");
}
void check(Checker& c, const SaveRequest& b) {
  c.non_empty(b.session_id, "session_id");
  c.bounded(b.ttl_seconds, 0, kMaxTtlSeconds, "ttl_seconds (0 = durable)");
}
void check(Checker& c, const DetokenizeRequest& b) {
  const int64_t n = c.vector(b.tokens, "tokens", "int32");
  c.tokens(uint64_t(n), "tokens");
}
void check(Checker&, const TokenizerInfoRequest&) {}
void check(Checker& c, const HeartbeatRequest& b) {
  c.bounded(int64_t(b.session_ids.size()), 0, 1024, "session_ids");
}
void check(Checker& c, const SessionRequest& b) { c.non_empty(b.session_id, "session_id"); }
void check(Checker& c, const LoadStateRequest& b) {
  c.non_empty(b.session_id, "session_id");
  c.non_empty(b.address, "address");
}
void check(Checker& c, const AddressRequest& b) { c.non_empty(b.address, "address"); }
void check(Checker& c, const CatalogListRequest& b) {
  c.bounded(b.limit, 1, kMaxCatalogLimit, "limit");
}
void check(Checker& c, const CatalogSearchRequest& b) {
  c.bounded(b.limit, 1, kMaxCatalogLimit, "limit");
}
void check(Checker& c, const LineageRequest& b) {
  c.non_empty(b.address, "address");
  c.require(b.max_ancestors >= 0, "max_ancestors", "must be >= 0");
  c.require(b.max_descendants >= 0, "max_descendants", "must be >= 0");
}
void check(Checker& c, const ForkRequest& b) {
  c.non_empty(b.address, "address");
  c.non_empty(b.name, "name");
}
void check(Checker& c, const TagRequest& b) {
  c.non_empty(b.address, "address");
  for (size_t i = 0; i < b.add.size(); ++i) c.non_empty(b.add[i], "add[" + std::to_string(i) + "]");
  for (size_t i = 0; i < b.remove.size(); ++i)
    c.non_empty(b.remove[i], "remove[" + std::to_string(i) + "]");
}
void check(Checker& c, const ImportPeftRequest& b) {
  c.non_empty(b.name, "name");
  c.non_empty(b.adapter_config_json, "adapter_config_json");
  c.vector(b.adapter_model, "adapter_model", "uint8");
}
void check(Checker&, const TokenizeRequest&) {}  // text: a long string (FieldChecks)
void check(Checker& c, const RunStartRequest& b) { c.non_empty(b.config_json, "config_json"); }
void check(Checker& c, const RunListRequest& b) { c.bounded(b.limit, 1, kMaxCatalogLimit, "limit"); }
void check(Checker& c, const RunStatusRequest& b) {
  c.non_empty(b.run_id, "run_id");
  c.require(b.metrics_since_step >= 0, "metrics_since_step", "must be >= 0");
}
void check(Checker& c, const RunIdRequest& b) { c.non_empty(b.run_id, "run_id"); }
void check(Checker& c, const DatasetsRequest& b) { c.bounded(b.examples, 0, 20, "examples"); }
void check(Checker& c, const SubscribeRequest& b) {
  for (size_t i = 0; i < b.topics.size(); ++i) {
    c.require(b.topics[i] == "metrics" || b.topics[i] == "residency",
              "topics[" + std::to_string(i) + "]",
              "unknown topic '" + b.topics[i] + "' (metrics, residency)");
  }
}
void check(Checker& c, const UnsubscribeRequest& b) {
  c.require(b.subscription != 0, "subscription", "must be the id of a subscribe request");
}
void check(Checker&, const Empty&) {}
void check(Checker&, const HandshakeRequest&) {}

}  // namespace

void validate_request(const Request& request, const Limits& limits) {
  Checker c(request, limits);
  const RequestBody expected = empty_request_body(request.op);
  c.require(request.body.index() == expected.index(), "body",
            std::string("not the body of op ") + op_name(request.op));
  if (request.token.size() > limits.max_string_bytes)
    c.fail(errc::limit_exceeded, "token", "longer than " + std::to_string(limits.max_string_bytes) + " bytes");
  FieldChecks fields(c);
  std::visit([&](const auto& b) { detail::walk(b, fields); }, request.body);
  std::visit([&](const auto& b) { check(c, b); }, request.body);
  c.all_frames_used();
}

}  // namespace spindle::protocol
