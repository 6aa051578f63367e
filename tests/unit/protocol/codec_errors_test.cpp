// Malformed input: every failure is a ProtocolError with a wire code and as much of the
// header as was read.

#include <gtest/gtest.h>

#include "message_samples.h"

namespace spindle::protocol {
namespace {

using testing::encode_parts;
using testing::sample_request;

ProtocolError decode_error(const std::vector<std::string>& parts, const Limits& limits = {}) {
  try {
    decode_request(parts, limits);
  } catch (const ProtocolError& e) {
    return e;
  }
  ADD_FAILURE() << "decoded without error";
  return ProtocolError("none", "none");
}

class BothEncodings : public ::testing::TestWithParam<Encoding> {};

TEST_P(BothEncodings, OtherProtocolVersionIsRefusedNamingBoth) {
  Request r = sample_request(Op::sample, GetParam());
  r.protocol_version = 2;
  const ProtocolError e = decode_error(encode_parts(r));
  EXPECT_EQ(e.code(), errc::unsupported_version);
  EXPECT_NE(std::string(e.what()).find("protocol_version 2"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("speaks 1"), std::string::npos) << e.what();
  EXPECT_EQ(e.request_id, r.request_id);
  EXPECT_EQ(e.op, Op::sample);
  EXPECT_EQ(e.encoding, GetParam());
}

// Binary only: a cut JSON document has no readable fields at all (bad_request).
TEST(Versions, OtherVersionWinsOverAnUnreadableBinaryBody) {
  Request r = sample_request(Op::sample, Encoding::binary);
  r.protocol_version = 3;
  std::vector<std::string> parts = encode_parts(r);
  parts[0].resize(parts[0].size() - 10);  // the body is cut: still unsupported_version
  EXPECT_EQ(decode_error(parts).code(), errc::unsupported_version);
}

TEST_P(BothEncodings, UnknownOpKeepsRequestId) {
  Request r = sample_request(Op::status, GetParam());
  std::string header = encode_request_header(r);
  const size_t at = header.find("status");
  ASSERT_NE(at, std::string::npos);
  header.replace(at, 6, "statux");
  const ProtocolError e = decode_error({header});
  EXPECT_EQ(e.code(), errc::unknown_op);
  EXPECT_EQ(e.request_id, r.request_id);
  EXPECT_FALSE(e.op.has_value());
  EXPECT_NE(std::string(e.what()).find("statux"), std::string::npos);
  // The server's reply to it.
  const Reply reply = make_error_reply(e);
  EXPECT_TRUE(reply.op_unknown);
  EXPECT_EQ(reply.request_id, r.request_id);
  EXPECT_EQ(reply.encoding, GetParam());
}

TEST_P(BothEncodings, EveryTruncationIsABadRequest) {
  const Request r = sample_request(Op::forward_backward, GetParam());
  std::vector<std::string> parts = encode_parts(r);
  const std::string header = parts[0];
  for (size_t n = 1; n < header.size(); ++n) {
    parts[0] = header.substr(0, n);
    const ProtocolError e = decode_error(parts);
    EXPECT_EQ(e.code(), errc::bad_request) << n << ": " << e.what();
  }
}

TEST_P(BothEncodings, BodyOfTheWrongShapeIsABadRequestWithId) {
  Request r = sample_request(Op::sample, GetParam());
  std::string header = encode_request_header(r);
  const size_t at = header.find("sample");
  header.replace(at, 6, "status");  // a sample body read as status: Empty reads, then trailing
  if (GetParam() == Encoding::json) {
    EXPECT_NO_THROW(decode_request(std::vector<std::string>{header}));  // extra members ignored
    return;
  }
  const ProtocolError e = decode_error({header});
  EXPECT_EQ(e.code(), errc::bad_request);
  EXPECT_EQ(e.request_id, r.request_id);
  EXPECT_EQ(e.op, Op::status);
}

INSTANTIATE_TEST_SUITE_P(Protocol, BothEncodings,
                         ::testing::Values(Encoding::binary, Encoding::json),
                         [](const auto& info) { return info.param == Encoding::json ? "J" : "B"; });

TEST(Malformed, EmptyMessageAndUnknownEncoding) {
  EXPECT_EQ(decode_error({}).code(), errc::bad_request);
  EXPECT_EQ(decode_error({""}).code(), errc::bad_request);
  const ProtocolError e = decode_error({"X{}"});
  EXPECT_EQ(e.code(), errc::bad_request);
  EXPECT_NE(std::string(e.what()).find("0x58"), std::string::npos) << e.what();
  EXPECT_FALSE(e.encoding.has_value());
}

TEST(Malformed, GarbageJson) {
  for (const char* h : {"J", "J{", "J[]", "J42", "J{\"protocol_version\": 1,}", "J{} trailing",
                        "J{\"protocol_version\": \"1\"}", "J{\"protocol_version\": -1}",
                        "J{\"protocol_version\": 1, \"request_id\": 1.5, \"op\": \"status\"}",
                        "J{\"protocol_version\": 1, \"request_id\": -1, \"token\": \"\", \"op\": \"status\"}",
                        "J\xff\xfe"}) {
    const ProtocolError e = decode_error({h});
    EXPECT_EQ(e.code(), errc::bad_request) << h << ": " << e.what();
  }
}

TEST(Malformed, DeepJsonNestingIsRefusedBeforeParsing) {
  const std::string deep = "J{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const ProtocolError e = decode_error({deep});
  EXPECT_EQ(e.code(), errc::bad_request);
  EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
}

TEST(Malformed, GarbageBinary) {
  EXPECT_EQ(decode_error({std::string("B")}).code(), errc::bad_request);
  EXPECT_EQ(decode_error({std::string("B\x07", 2)}).code(), errc::bad_request);  // endianness
  EXPECT_EQ(decode_error({std::string("B\x01\x01\x00", 4)}).code(), errc::bad_request);
  // Trailing bytes after a complete message.
  std::vector<std::string> parts = encode_parts(sample_request(Op::status));
  parts[0] += "x";
  EXPECT_EQ(decode_error(parts).code(), errc::bad_request);
}

// A length field claiming far more than the header holds is refused without allocating it.
TEST(Malformed, HugeBinaryLengthsAreRefused) {
  const Request r = sample_request(Op::catalog_tag);
  std::string header = encode_request_header(r);
  // token length (offset: 'B', flag, u32 version, u64 id).
  std::string bad = header;
  bad.replace(14, 8, std::string("\x00\x00\x00\x00\x00\x01\x00\x00", 8));
  ProtocolError e = decode_error({bad});
  EXPECT_EQ(e.code(), errc::bad_request);
  EXPECT_EQ(e.request_id, r.request_id);
  // The length of the tag vector `add` (the body's last-but-one count).
  const size_t add_at = header.find(std::string("\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00", 10));
  ASSERT_NE(add_at, std::string::npos);
  bad = header;
  bad.replace(add_at, 8, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));
  e = decode_error({bad});
  EXPECT_EQ(e.code(), errc::bad_request);
  EXPECT_EQ(e.op, Op::catalog_tag);
  EXPECT_NE(std::string(e.what()).find("catalog_tag"), std::string::npos) << e.what();
}

TEST(Malformed, BoolMustBeZeroOrOne) {
  Request r = sample_request(Op::create_training);
  std::string header = encode_request_header(r);
  // train_attn false, train_mlp true, train_unembed true: "\x00\x01\x01" then the seed.
  const size_t at = header.find(std::string("\x00\x01\x01\xff", 4));
  ASSERT_NE(at, std::string::npos);
  header[at + 1] = 2;
  EXPECT_EQ(decode_error({header}).code(), errc::bad_request);
}

TEST(Limits, HeaderFrameCountAndFrameSize) {
  const Request r = sample_request(Op::forward_backward);
  const std::vector<std::string> parts = encode_parts(r);
  Limits l;
  l.max_header_bytes = parts[0].size() - 2;
  ProtocolError e = decode_error(parts, l);
  EXPECT_EQ(e.code(), errc::limit_exceeded);
  EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos);

  l = Limits{};
  l.max_frames = uint32_t(parts.size() - 2);
  e = decode_error(parts, l);
  EXPECT_EQ(e.code(), errc::limit_exceeded);
  EXPECT_EQ(e.request_id, r.request_id);
  EXPECT_EQ(e.op, Op::forward_backward);

  l = Limits{};
  l.max_frame_bytes = 15;  // the 5-element frames are 20 bytes
  e = decode_error(parts, l);
  EXPECT_EQ(e.code(), errc::limit_exceeded);
  EXPECT_NE(std::string(e.what()).find("frame"), std::string::npos) << e.what();

  l.max_frame_bytes = 20;
  EXPECT_NO_THROW(decode_request(parts, l));
}

TEST(Replies, MalformedRepliesThrowProtocolError) {
  Reply r = testing::sample_reply(Op::sample);
  std::vector<std::string> parts = encode_parts(r);
  parts[0].resize(parts[0].size() / 2);
  EXPECT_THROW(decode_reply(parts), ProtocolError);
  r.protocol_version = 9;
  try {
    decode_reply(encode_parts(r));
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), errc::unsupported_version);
  }
}

}  // namespace
}  // namespace spindle::protocol
