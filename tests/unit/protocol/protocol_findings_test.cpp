// What a client written only from PROTOCOL.md found (issue 16), at the codec and validation
// level: non-UTF-8 text, the tokenize text limit, JSON type errors that name the field, and
// class versions in the binary encoding. The daemon-level halves are in
// tests/integration/service/protocol_findings_test.cpp.

#include <gtest/gtest.h>

#include <cereal/archives/portable_binary.hpp>

#include <sstream>

#include "message_samples.h"

namespace spindle::protocol {
namespace {

using testing::encode_parts;
using testing::sample_request;

ProtocolError decode_error(const std::vector<std::string>& parts) {
  try {
    decode_request(parts);
  } catch (const ProtocolError& e) {
    return e;
  }
  ADD_FAILURE() << "decoded without error";
  return ProtocolError("none", "none");
}

ProtocolError validate_error(const Request& r, const Limits& limits = {}) {
  try {
    validate_request(r, limits);
  } catch (const ProtocolError& e) {
    return e;
  }
  ADD_FAILURE() << "validated";
  return ProtocolError("none", "none");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A J header with the first `from` replaced by `to`.
std::string edited(const std::string& header, const std::string& from, const std::string& to) {
  const size_t at = header.find(from);
  EXPECT_NE(at, std::string::npos) << from << " not in " << header;
  if (at == std::string::npos) return header;
  return header.substr(0, at) + to + header.substr(at + from.size());
}

// ---- 1. text fields must be UTF-8 -------------------------------------------------------------

TEST(Utf8, InvalidNameIsRefusedNamingTheFieldInBothEncodings) {
  Request b = sample_request(Op::save_weights);
  std::get<SaveRequest>(b.body).name = "step \xff\xfe";
  const Request back = decode_request(encode_parts(b));  // B carries the bytes
  ProtocolError e = validate_error(back);
  EXPECT_EQ(e.code(), errc::invalid_argument);
  EXPECT_TRUE(contains(e.what(), "name: not valid UTF-8 (byte 0xff at offset 5)")) << e.what();

  // J: rapidjson reads raw bytes inside a string as they are; validation refuses them.
  Request j = sample_request(Op::save_state, Encoding::json);
  const std::string header = edited(encode_request_header(j), "\"name\": \"step-10\"",
                                    "\"name\": \"step-\xc3\x28\"");
  const Request read = decode_request(std::vector<std::string>{header});
  e = validate_error(read);
  EXPECT_EQ(e.code(), errc::invalid_argument);
  EXPECT_TRUE(contains(e.what(), "name: not valid UTF-8 (byte 0xc3 at offset 5)")) << e.what();
}

TEST(Utf8, EveryStringFieldIsChecked) {
  Request r = sample_request(Op::catalog_tag);
  std::get<TagRequest>(r.body).add[1] = "ok\xed\xa0\x80";  // an encoded surrogate
  EXPECT_TRUE(contains(validate_error(r).what(), "add[1]: not valid UTF-8")) << validate_error(r).what();
  r = sample_request(Op::sample);
  std::get<SampleRequest>(r.body).sampling_params.stop_strings[0] = "\xc0\xaf";  // overlong
  EXPECT_TRUE(contains(validate_error(r).what(), "sampling_params.stop_strings[0]: not valid UTF-8"));
  r = sample_request(Op::reward_test);
  std::get<RewardTestRequest>(r.body).rows[1].metadata_json = "{\"k\": \"\xf5\"}";
  EXPECT_TRUE(contains(validate_error(r).what(), "rows[1].metadata_json: not valid UTF-8"));
  r = sample_request(Op::tokenize);
  std::get<TokenizeRequest>(r.body).text = "cut \xe2\x9c";
  EXPECT_TRUE(contains(validate_error(r).what(), "text: not valid UTF-8 (byte 0xe2 at offset 4)"));
  // Multi-byte text is fine (the samples hold "✨", "—", "ünïcode").
  for (Op op : testing::all_ops()) EXPECT_NO_THROW(validate_request(sample_request(op), {})) << op_name(op);
}

// ---- 3. tokenize text: a long string, bounded by the header ------------------------------------

TEST(TokenizeLimit, TextIsBoundedByTheHeaderNotMaxStringBytes) {
  const Limits limits;
  for (Encoding enc : {Encoding::binary, Encoding::json}) {
    Request r = sample_request(Op::tokenize, enc);
    std::get<TokenizeRequest>(r.body).text = std::string(200 * 1024, 'a');  // > 64 KiB
    const Request back = decode_request(encode_parts(r), limits);
    EXPECT_NO_THROW(validate_request(back, limits));
  }
  Request r = sample_request(Op::tokenize);
  std::get<TokenizeRequest>(r.body).text = std::string(limits.max_header_bytes + 1, 'a');
  const ProtocolError e = validate_error(r, limits);
  EXPECT_EQ(e.code(), errc::limit_exceeded);
  EXPECT_TRUE(contains(e.what(), "text: 1048577 bytes, limit 1048576")) << e.what();
  // Other strings keep max_string_bytes (catalog_search has a `text` too).
  r = sample_request(Op::catalog_search);
  std::get<CatalogSearchRequest>(r.body).text = std::string(limits.max_string_bytes + 1, 'a');
  EXPECT_EQ(validate_error(r, limits).code(), errc::limit_exceeded);
}

TEST(TokenizeLimit, DetokenizeTokensAreBoundedByMaxTokensPerRequest) {
  Limits limits;
  limits.max_tokens_per_request = 4;
  const Request r = sample_request(Op::detokenize);  // 5 tokens
  const ProtocolError e = validate_error(r, limits);
  EXPECT_EQ(e.code(), errc::limit_exceeded);
  EXPECT_TRUE(contains(e.what(), "tokens: 5 tokens, limit 4")) << e.what();
}

// ---- 4. JSON type errors name the field ---------------------------------------------------------

struct TypeCase {
  Op op;
  std::string from, to;  // an edit of the J encoding of sample_request(op)
  std::string message;   // expected in the error
};

TEST(JsonTypes, WrongTypesAreBadRequestsNamingTheFieldPath) {
  const std::vector<TypeCase> cases = {
      {Op::catalog_list, "\"limit\": 50", "\"limit\": \"50\"",
       "body.limit: expected a non-negative integer (u32), got the string \"50\""},
      {Op::catalog_list, "\"limit\": 50", "\"limit\": -50",
       "body.limit: expected a non-negative integer (u32), got -50"},
      {Op::catalog_list, "\"limit\": 50", "\"limit\": 4294967296",
       "body.limit: expected a non-negative integer (u32), got 4294967296 (out of range)"},
      {Op::create_training, "\"seed\": 18446744073709551615", "\"seed\": -1",
       "body.seed: expected a non-negative integer (u64), got -1"},
      {Op::sample, "\"num_samples\": 4", "\"num_samples\": 1.5",
       "body.num_samples: expected an integer (i32), got 1.5 (not an integer)"},
      {Op::sample, "\"num_samples\": 4", "\"num_samples\": 4e0",
       "body.num_samples: expected an integer (i32), got 4 (not an integer)"},
      {Op::sample, "\"num_samples\": 4", "\"num_samples\": 2147483648",
       "body.num_samples: expected an integer (i32), got 2147483648 (out of range)"},
      {Op::sample, "\"frame\": 0", "\"frame\": \"0\"",
       "body.prompt.frame: expected a non-negative integer (u32), got the string \"0\""},
      {Op::sample, "\"stop_token_ids\": [2,13]", "\"stop_token_ids\": [2, null]",
       "body.sampling_params.stop_token_ids[1]: expected an integer (i32), got null"},
      {Op::sample, "\"temperature\": 0.699999988079071", "\"temperature\": \"warm\"",
       "body.sampling_params.temperature: expected a number, got the string \"warm\""},
      {Op::sample, "\"include_prompt_logprobs\": true", "\"include_prompt_logprobs\": 1",
       "body.include_prompt_logprobs: expected true or false, got 1"},
      {Op::sample, "\"address\": \"spindle://alice/p@latest\"", "\"address\": 7",
       "body.address: expected a string, got 7"},
      {Op::sample, "\"stop_strings\": [", "\"stop_strings\": {\"a\": 1}, \"x\": [",
       "body.sampling_params.stop_strings: expected an array, got an object"},
      {Op::optim_step, "\"adam_params\": {", "\"adam_params\": [], \"x\": {",
       "body.adam_params: expected an object, got an array"},
      {Op::forward, "\"shape\": [4]", "\"shape\": [true]",
       "body.data[0].model_input.shape[0]: expected an integer (i64), got true"},
      {Op::catalog_list, "\"limit\": 50,", "",
       "body.limit: missing (every member must be present"},
  };
  for (const TypeCase& c : cases) {
    const Request r = sample_request(c.op, Encoding::json);
    const std::string header = edited(encode_request_header(r), c.from, c.to);
    std::vector<std::string> parts{header};
    parts.insert(parts.end(), r.frames.begin(), r.frames.end());
    const ProtocolError e = decode_error(parts);
    EXPECT_EQ(e.code(), errc::bad_request) << e.what();
    EXPECT_TRUE(contains(e.what(), c.message)) << "expected: " << c.message << "\ngot: " << e.what();
    EXPECT_FALSE(contains(e.what(), "rapidjson")) << e.what();
    EXPECT_EQ(e.request_id, r.request_id);
    EXPECT_EQ(e.op, c.op);
  }
}

TEST(JsonTypes, HeaderFieldsAreNamedToo) {
  const std::string h =
      R"(J{"protocol_version": 1, "request_id": "7", "token": "", "op": "status", "body": {}})";
  const ProtocolError e = decode_error({h});
  EXPECT_EQ(e.code(), errc::bad_request);
  EXPECT_TRUE(contains(e.what(), "request_id: expected a non-negative integer (u64), got the string \"7\""))
      << e.what();
}

// An escaped NUL is a NUL byte, as in the binary encoding (cereal's reader cut the string).
TEST(JsonTypes, StringsAreReadWhole) {
  const std::string h =
      R"(J{"protocol_version": 1, "request_id": 7, "token": "", "op": "catalog_search",)"
      R"( "body": {"cereal_class_version": 1, "text": "a\u0000b", "limit": 3}})";
  const Request r = decode_request(std::vector<std::string>{h});
  EXPECT_EQ(std::get<CatalogSearchRequest>(r.body).text, std::string("a\0b", 3));
}

// ---- 5. class versions: newer reads older; older refuses newer in B, reads it in J -------------

// SaveRequest as an older (1) and a newer (3) peer would write it.
struct SaveRequestV1 {
  std::string session_id, name, metrics_json;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(name), CEREAL_NVP(metrics_json));
  }
};
struct SaveRequestV3 {
  std::string session_id, name, metrics_json;
  int64_t ttl_seconds = 0;
  std::string future_field;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(session_id), CEREAL_NVP(name), CEREAL_NVP(metrics_json),
       CEREAL_NVP(ttl_seconds), CEREAL_NVP(future_field));
  }
};
// SamplingParamsMsg with one more field (version 2), nested in a SampleRequest.
struct SamplingParamsV2 {
  SamplingParamsMsg v1;
  float min_p = 0.05f;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(cereal::make_nvp("max_tokens", v1.max_tokens), cereal::make_nvp("temperature", v1.temperature),
       cereal::make_nvp("top_k", v1.top_k), cereal::make_nvp("top_p", v1.top_p),
       cereal::make_nvp("seed", v1.seed), cereal::make_nvp("stop_token_ids", v1.stop_token_ids),
       cereal::make_nvp("stop_strings", v1.stop_strings), CEREAL_NVP(min_p));
  }
};
struct SampleRequestWithNewerParams {
  SampleRequest s;
  SamplingParamsV2 params;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(cereal::make_nvp("address", s.address), cereal::make_nvp("prompt", s.prompt),
       cereal::make_nvp("num_samples", s.num_samples), cereal::make_nvp("sampling_params", params),
       cereal::make_nvp("include_prompt_logprobs", s.include_prompt_logprobs),
       cereal::make_nvp("topk_prompt_logprobs", s.topk_prompt_logprobs));
  }
};

}  // namespace
}  // namespace spindle::protocol

CEREAL_CLASS_VERSION(spindle::protocol::SaveRequestV1, 1);
CEREAL_CLASS_VERSION(spindle::protocol::SaveRequestV3, 3);
CEREAL_CLASS_VERSION(spindle::protocol::SamplingParamsV2, 2);
CEREAL_CLASS_VERSION(spindle::protocol::SampleRequestWithNewerParams, 2);

namespace spindle::protocol {
namespace {

// A binary request header of `op` whose body is `body`, written by cereal as another build would.
template <class Body>
std::string binary_header(const char* op, const Body& body) {
  std::ostringstream os(std::ios::binary);
  os.put('B');
  {
    cereal::PortableBinaryOutputArchive ar(os, cereal::PortableBinaryOutputArchive::Options::LittleEndian());
    ar(uint32_t(kProtocolVersion), uint64_t(9), std::string("tok"), std::string(op), body);
  }
  return std::move(os).str();
}

TEST(ClassVersions, NewerReaderReadsAnOlderBinaryWriter) {
  const std::string h = binary_header("save_weights", SaveRequestV1{"s-1", "n", "{}"});
  const Request r = decode_request(std::vector<std::string>{h});
  const auto& b = std::get<SaveRequest>(r.body);
  EXPECT_EQ(b.session_id, "s-1");
  EXPECT_EQ(b.ttl_seconds, 0);  // version 1 has none: the C++ default
}

TEST(ClassVersions, OlderBinaryReaderRefusesANewerStructNamingIt) {
  ProtocolError e =
      decode_error({binary_header("save_weights", SaveRequestV3{"s-1", "n", "{}", 60, "x"})});
  EXPECT_EQ(e.code(), errc::bad_request);
  EXPECT_TRUE(contains(e.what(), "body: class version 3 is newer than this side reads (2)")) << e.what();
  EXPECT_FALSE(contains(e.what(), "trailing")) << e.what();
  EXPECT_EQ(e.request_id, 9u);
  EXPECT_EQ(e.op, Op::save_weights);

  // Nested: the struct's path is named, nothing after it is misread.
  SampleRequestWithNewerParams s;
  s.s.address = "stories260K";
  s.s.prompt = {0, "int32", {1}};
  e = decode_error({binary_header("sample", s), std::string(4, '\0')});
  EXPECT_EQ(e.code(), errc::bad_request);
  EXPECT_TRUE(contains(e.what(), "body.sampling_params: class version 2 is newer than this side reads (1)"))
      << e.what();
}

TEST(ClassVersions, OlderBinaryReaderOfARepliesRefusesANewerOneToo) {
  // A client built before StatusReply v4 reading one: the same rule on decode_reply.
  std::ostringstream os(std::ios::binary);
  os.put('B');
  {
    cereal::PortableBinaryOutputArchive ar(os, cereal::PortableBinaryOutputArchive::Options::LittleEndian());
    ar(uint32_t(kProtocolVersion), uint64_t(3), std::string("handshake"), true, uint32_t(2));
  }
  try {
    decode_reply(std::vector<std::string>{std::move(os).str()});
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), errc::bad_request);
    EXPECT_TRUE(contains(e.what(), "body: class version 2 is newer than this side reads (1)")) << e.what();
  }
}

TEST(ClassVersions, JsonReadsNewerAndOlderStructs) {
  const std::string newer =
      R"(J{"protocol_version": 1, "request_id": 4, "token": "t", "op": "save_weights",)"
      R"( "body": {"cereal_class_version": 3, "session_id": "s", "name": "n", "metrics_json": "",)"
      R"( "ttl_seconds": 60, "future_field": {"nested": [1]}}})";
  const Request r = decode_request(std::vector<std::string>{newer});
  EXPECT_EQ(std::get<SaveRequest>(r.body).ttl_seconds, 60);
  const std::string older =
      R"(J{"protocol_version": 1, "request_id": 4, "token": "t", "op": "save_weights",)"
      R"( "body": {"cereal_class_version": 1, "session_id": "s", "name": "n", "metrics_json": ""}})";
  EXPECT_EQ(std::get<SaveRequest>(decode_request(std::vector<std::string>{older}).body).ttl_seconds, 0);
}

}  // namespace
}  // namespace spindle::protocol
