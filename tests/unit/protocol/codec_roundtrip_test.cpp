// Round trips of every op's request and reply in both encodings, the JSON layout a client in
// another language sees, and agreement of the bounded binary reader with cereal's own.

#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "message_samples.h"

namespace spindle::protocol {
namespace {

using testing::all_ops;
using testing::encode_parts;
using testing::sample_reply;
using testing::sample_request;

class EveryOp : public ::testing::TestWithParam<std::tuple<Op, Encoding>> {};

TEST_P(EveryOp, RequestRoundTrips) {
  const auto [op, encoding] = GetParam();
  const Request in = sample_request(op, encoding);
  const Request out = decode_request(encode_parts(in));
  EXPECT_EQ(out.encoding, encoding);
  EXPECT_EQ(out.protocol_version, kProtocolVersion);
  EXPECT_EQ(out.request_id, in.request_id);
  EXPECT_EQ(out.token, in.token);
  EXPECT_EQ(out.op, op);
  EXPECT_TRUE(out.body == in.body) << encode_request_header(out);
  EXPECT_EQ(out.frames, in.frames);
  EXPECT_NO_THROW(validate_request(out, Limits{}));
}

TEST_P(EveryOp, ReplyRoundTrips) {
  const auto [op, encoding] = GetParam();
  const Reply in = sample_reply(op, encoding);
  const Reply out = decode_reply(encode_parts(in));
  EXPECT_EQ(out.encoding, encoding);
  EXPECT_EQ(out.request_id, in.request_id);
  EXPECT_EQ(out.op, op);
  EXPECT_TRUE(out.ok);
  EXPECT_TRUE(out.body == in.body) << encode_reply_header(out);
  EXPECT_EQ(out.frames, in.frames);
}

TEST_P(EveryOp, ErrorReplyRoundTrips) {
  const auto [op, encoding] = GetParam();
  Reply in = make_error_reply(encoding, 9, op, errc::overloaded, "queue full ✗");
  in.error.queue_depth = 100;
  in.error.queue_limit = 100;
  in.error.retry_after_ms = 250;
  const Reply out = decode_reply(encode_parts(in));
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.op, op);
  EXPECT_FALSE(out.op_unknown);
  EXPECT_TRUE(out.error == in.error);
}

// Binary headers are cereal's portable binary: cereal's own reader takes what we write, and
// the two readers agree on every body.
INSTANTIATE_TEST_SUITE_P(Protocol, EveryOp,
                         ::testing::Combine(::testing::ValuesIn(all_ops()),
                                            ::testing::Values(Encoding::binary, Encoding::json)),
                         [](const auto& info) {
                           return std::string(op_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == Encoding::json ? "_J" : "_B");
                         });

TEST(BinaryFormat, EveryBodyReadsWithCerealsOwnArchive) {
  for (Op op : all_ops()) {
    SCOPED_TRACE(op_name(op));
    const Request in = sample_request(op, Encoding::binary);
    const std::string header = encode_request_header(in);
    ASSERT_EQ(header[0], 'B');
    ASSERT_EQ(header[1], 1) << "little-endian flag";
    std::istringstream is(header.substr(1));
    cereal::PortableBinaryInputArchive ar(is);
    uint32_t version = 0;
    uint64_t id = 0;
    std::string token, op_text;
    ar(version, id, token, op_text);
    RequestBody body = empty_request_body(op);
    std::visit([&](auto& b) { ar(b); }, body);
    EXPECT_EQ(version, kProtocolVersion);
    EXPECT_EQ(id, in.request_id);
    EXPECT_EQ(op_text, op_name(op));
    EXPECT_TRUE(body == in.body);
    EXPECT_EQ(is.peek(), std::char_traits<char>::eof()) << "nothing after the body";
  }
}

TEST(OpNames, RoundTripAndUnknown) {
  for (Op op : all_ops()) EXPECT_EQ(op_from_name(op_name(op)), op);
  EXPECT_FALSE(op_from_name("Sample"));
  EXPECT_FALSE(op_from_name(""));
  EXPECT_STREQ(op_name(Op::catalog_lineage), "catalog_lineage");
}

// The exact header a hand-written client produces: version fields first, names as in
// messages.h, one line.
TEST(JsonLayout, FlatTopLevelObject) {
  Request r;
  r.encoding = Encoding::json;
  r.request_id = 7;
  r.token = "secret";
  r.op = Op::status;
  r.body = Empty{};
  EXPECT_EQ(encode_request_header(r),
            R"(J{"protocol_version": 1,"request_id": 7,"token": "secret","op": "status",)"
            R"("body": {"cereal_class_version": 1}})");
}

TEST(JsonLayout, BinaryLayoutOfStatusRequest) {
  Request r;
  r.request_id = 7;
  r.token = "tok";
  r.op = Op::status;
  r.body = Empty{};
  const std::string expected(
      "B\x01"                                  // encoding, little-endian flag
      "\x01\x00\x00\x00"                       // protocol_version u32
      "\x07\x00\x00\x00\x00\x00\x00\x00"       // request_id u64
      "\x03\x00\x00\x00\x00\x00\x00\x00tok"    // token: u64 length + bytes
      "\x06\x00\x00\x00\x00\x00\x00\x00status" // op
      "\x01\x00\x00\x00",                      // Empty's class version (u32), no fields
      43);
  EXPECT_EQ(encode_request_header(r), expected);
}

// What a Python client sends: every object carries "cereal_class_version", members in any
// order, unknown members present, integers as JSON integers.
TEST(JsonLayout, HandWrittenPythonStyleRequestDecodes) {
  const std::string header =
      "J{\"op\": \"sample\", \"request_id\": 12, \"protocol_version\": 1, \"token\": \"t0k\","
      " \"client_extra\": {\"nested\": [1, 2]},"
      " \"body\": {\"cereal_class_version\": 1, \"address\": \"spindle://alice/p@latest\","
      "  \"num_samples\": 2, \"future_field\": \"ignored\","
      "  \"prompt\": {\"cereal_class_version\": 1, \"frame\": 0, \"dtype\": \"int32\", \"shape\": [3]},"
      "  \"sampling_params\": {\"cereal_class_version\": 1, \"max_tokens\": 8, \"temperature\": 0.5,"
      "    \"top_k\": 0, \"top_p\": 1, \"seed\": 99, \"stop_token_ids\": [2],"
      "    \"stop_strings\": [\"\\n\"]}}}";
  const int32_t prompt[] = {1, 200, 3};
  const std::string frame(reinterpret_cast<const char*>(prompt), sizeof prompt);
  const Request r = decode_request(std::vector<std::string>{header, frame});
  EXPECT_EQ(r.encoding, Encoding::json);
  EXPECT_EQ(r.request_id, 12u);
  EXPECT_EQ(r.token, "t0k");
  ASSERT_EQ(r.op, Op::sample);
  const auto& s = std::get<SampleRequest>(r.body);
  EXPECT_EQ(s.address, "spindle://alice/p@latest");
  EXPECT_EQ(s.num_samples, 2);
  EXPECT_EQ(s.prompt.shape, std::vector<int64_t>{3});
  EXPECT_EQ(s.sampling_params.max_tokens, 8);
  EXPECT_FLOAT_EQ(s.sampling_params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.sampling_params.top_p, 1.0f);  // an integer where a float is expected
  EXPECT_EQ(s.sampling_params.seed, 99u);
  EXPECT_EQ(s.sampling_params.stop_strings, std::vector<std::string>{"\n"});
  EXPECT_EQ(read_int32(s.prompt, r.frames, "prompt"), std::vector<int32_t>(prompt, prompt + 3));
  EXPECT_NO_THROW(validate_request(r, Limits{}));
}

// cereal reads "cereal_class_version" only from the first object of each type it loads (in
// serialize order); later objects of that type may omit it or carry it (then ignored).
TEST(JsonLayout, ClassVersionRequiredOnlyInFirstObjectOfAType) {
  const std::string tail = R"("loss_fn": "cross_entropy", "loss_fn_config": []}})";
  const auto header = [&](const std::string& first_tensor_version,
                          const std::string& later_tensor_version) {
    return "J{\"protocol_version\": 1, \"request_id\": 3, \"token\": \"\", \"op\": \"forward\","
           " \"body\": {\"cereal_class_version\": 1, \"session_id\": \"s\", \"data\": [{"
           "\"cereal_class_version\": 1, \"model_input\": {" +
           first_tensor_version +
           "\"frame\": 0, \"dtype\": \"int32\", \"shape\": [1]}, \"loss_fn_inputs\": [{"
           "\"cereal_class_version\": 1, \"name\": \"target_tokens\", \"tensor\": {" +
           later_tensor_version + "\"frame\": 1, \"dtype\": \"int32\", \"shape\": [1]}}]}], " +
           tail;
  };
  const std::string v = "\"cereal_class_version\": 1, ";
  const std::vector<std::string> frames = {std::string(4, '\0'), std::string(4, '\0')};
  const auto decode = [&](const std::string& h) {
    std::vector<std::string> parts{h};
    parts.insert(parts.end(), frames.begin(), frames.end());
    return decode_request(parts);
  };
  EXPECT_NO_THROW(decode(header(v, v)));
  EXPECT_NO_THROW(decode(header(v, "")));  // second TensorRef: absent is fine
  try {
    decode(header("", v));  // the first TensorRef read lacks it
    FAIL() << "expected ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), errc::bad_request);
    EXPECT_NE(std::string(e.what()).find("cereal_class_version"), std::string::npos) << e.what();
    EXPECT_EQ(e.request_id, 3u);
    EXPECT_EQ(e.op, Op::forward);
  }
}

TEST(JsonLayout, MissingFieldIsAnError) {
  const std::string h =
      R"(J{"protocol_version": 1, "request_id": 5, "token": "", "op": "catalog_search",)"
      R"( "body": {"cereal_class_version": 1, "text": "x"}})";
  try {
    decode_request(std::vector<std::string>{h});
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), errc::bad_request);
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
}

// Output is valid JSON: invalid UTF-8 becomes U+FFFD, non-finite numbers are refused.
TEST(JsonSafety, InvalidUtf8IsReplaced) {
  Reply r = sample_reply(Op::sample, Encoding::json);
  std::get<SampleReply>(r.body).sequences[0].text = "ok \xe2\x9c half \xff end";
  const Reply back = decode_reply(encode_parts(r));
  EXPECT_EQ(std::get<SampleReply>(back.body).sequences[0].text,
            "ok \xef\xbf\xbd\xef\xbf\xbd half \xef\xbf\xbd end");
  // The binary encoding carries the bytes unchanged.
  r.encoding = Encoding::binary;
  const Reply raw = decode_reply(encode_parts(r));
  EXPECT_EQ(std::get<SampleReply>(raw.body).sequences[0].text, "ok \xe2\x9c half \xff end");
}

TEST(JsonSafety, NonFiniteNumberIsRefusedAtEncode) {
  Reply r = sample_reply(Op::status, Encoding::json);
  std::get<StatusReply>(r.body).tokens_per_s = std::numeric_limits<double>::quiet_NaN();
  try {
    encode_reply_header(r);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), errc::internal);
    EXPECT_NE(std::string(e.what()).find("tokens_per_s"), std::string::npos) << e.what();
  }
  r.encoding = Encoding::binary;  // binary carries NaN as IEEE bits
  EXPECT_TRUE(std::isnan(std::get<StatusReply>(decode_reply(encode_parts(r)).body).tokens_per_s));
}

TEST(ErrorReplies, UnknownOpTravelsAsEmptyOp) {
  ProtocolError e(errc::unknown_op, "unknown op 'frobnicate'");
  e.encoding = Encoding::json;
  e.request_id = 77;
  const Reply r = make_error_reply(e);
  EXPECT_TRUE(r.op_unknown);
  const std::string header = encode_reply_header(r);
  EXPECT_NE(header.find(R"("op": "")"), std::string::npos) << header;
  const Reply back = decode_reply(std::vector<std::string>{header});
  EXPECT_TRUE(back.op_unknown);
  EXPECT_EQ(back.request_id, 77u);
  EXPECT_EQ(back.error.code, errc::unknown_op);
}

TEST(ErrorReplies, WrongBodyTypeIsAnInternalError) {
  Request r = sample_request(Op::sample);
  r.body = Empty{};
  EXPECT_THROW(encode_request_header(r), ProtocolError);
  Reply rep = sample_reply(Op::status);
  rep.body = Empty{};
  EXPECT_THROW(encode_reply_header(rep), ProtocolError);
}

TEST(TensorFrames, RoundTripAndChecks) {
  Frames f;
  const std::vector<int32_t> ints = {1, -2, 3, 4, 5, 6};
  const TensorRef a = add_tensor(f, std::span<const int32_t>(ints), {2, 3});
  const std::vector<float> floats = {0.5f, std::numeric_limits<float>::quiet_NaN()};
  const TensorRef b = add_tensor(f, std::span<const float>(floats));
  const TensorRef c = add_bytes(f, "abc");
  EXPECT_EQ(a.frame, 0u);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f[0].substr(0, 4), std::string("\x01\x00\x00\x00", 4));  // little-endian
  EXPECT_EQ(f[0].substr(4, 4), std::string("\xfe\xff\xff\xff", 4));
  EXPECT_EQ(read_int32(a, f, "a"), ints);
  const auto back = read_float32(b, f, "b");
  EXPECT_EQ(back[0], 0.5f);
  EXPECT_TRUE(std::isnan(back[1]));
  EXPECT_EQ(read_bytes(c, f, "c"), "abc");
  EXPECT_THROW(read_float32(a, f, "a"), ProtocolError);  // dtype
  TensorRef bad = a;
  bad.shape = {7};
  EXPECT_THROW(read_int32(bad, f, "a"), ProtocolError);  // size
  bad = a;
  bad.frame = 9;
  EXPECT_THROW(read_int32(bad, f, "a"), ProtocolError);  // frame
  EXPECT_THROW(add_tensor(f, std::span<const int32_t>(ints), {4}), ProtocolError);
}

}  // namespace
}  // namespace spindle::protocol
