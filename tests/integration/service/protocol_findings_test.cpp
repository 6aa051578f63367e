// What a client written only from PROTOCOL.md found (issue 16), against a real spindled: a
// non-UTF-8 save name is invalid_argument (it was `internal`: nlohmann's type_error.316), a
// message of one empty frame gets bad_request (it got no reply), tokenize takes text beyond
// 64 KiB (the header bounds it), a reply too big for a client's header limit is refused with
// limit_exceeded, and JSON type errors name the field. Codec-level halves:
// tests/unit/protocol/protocol_findings_test.cpp.

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The reply to a request sent as raw frames (the first reply that comes).
Reply raw_call(RawClient& c, const std::vector<std::string>& parts) {
  c.send_raw(parts);
  auto r = c.receive(10000);
  if (!r) throw std::runtime_error("no reply");
  return *r;
}

// A J header of `op` with `body`, its string field `placeholder` replaced by raw `bytes`.
std::string json_header_with(const std::string& token, Op op, RequestBody body,
                             const std::string& placeholder, const std::string& bytes) {
  Request r;
  r.encoding = Encoding::json;
  r.request_id = 77;
  r.token = token;
  r.op = op;
  r.body = std::move(body);
  std::string h = encode_request_header(r);
  const size_t at = h.find(placeholder);
  EXPECT_NE(at, std::string::npos) << h;
  return at == std::string::npos ? h : h.replace(at, placeholder.size(), bytes);
}

class ProtocolFindings : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
    daemon_ = std::make_unique<Daemon>(fresh_dir("findings"), std::vector<std::string>{});
    client_ = std::make_unique<RawClient>(daemon_->ipc(), daemon_->token());
  }
  void TearDown() override {
    if (!daemon_) return;
    // Still serving, and no request ended as a server bug.
    EXPECT_EQ(client_->ok<HandshakeReply>(Op::handshake, HandshakeRequest{"after"}).tenant, "local");
    EXPECT_EQ(daemon_->terminate(), 0);
    EXPECT_FALSE(contains(daemon_->log(), "internal")) << daemon_->log();
  }

  std::string create_session() {
    CreateTrainingRequest c;
    c.base_model = "stories260K";
    c.policy = "findings";
    c.rank = 2;
    return client_->ok<TrainingSessionReply>(Op::create_training, c).session_id;
  }

  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<RawClient> client_;
};

TEST_F(ProtocolFindings, NonUtf8SaveNameIsInvalidArgumentNamingTheField) {
  const std::string sid = create_session();
  for (Op op : {Op::save_weights, Op::save_state}) {
    const Reply r = client_->call(op, SaveRequest{sid, "step \xff", "", 0});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error.code, errc::invalid_argument) << r.error.message;
    EXPECT_TRUE(contains(r.error.message, "name: not valid UTF-8 (byte 0xff at offset 5)"))
        << r.error.message;
  }
  // J carries raw bytes inside a string as well (the JSON parser does not check UTF-8).
  const std::string h = json_header_with(daemon_->token(), Op::save_weights,
                                         SaveRequest{sid, "NAME", "", 0}, "NAME", "bad\xc3\x28");
  const Reply j = raw_call(*client_, {h});
  EXPECT_EQ(j.request_id, 77u);
  EXPECT_EQ(j.error.code, errc::invalid_argument) << j.error.message;
  EXPECT_TRUE(contains(j.error.message, "name: not valid UTF-8")) << j.error.message;
  // Nothing was saved; a valid name saves.
  const SaveReply saved = client_->ok<SaveReply>(Op::save_weights, SaveRequest{sid, "step ✓", "", 0});
  EXPECT_FALSE(saved.revision_id.empty());
  EXPECT_FALSE(contains(daemon_->log(), "type_error"));
}

TEST_F(ProtocolFindings, OneEmptyFrameGetsBadRequest) {
  const Reply r = raw_call(*client_, {""});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error.code, errc::bad_request);
  EXPECT_TRUE(contains(r.error.message, "empty header frame")) << r.error.message;
  EXPECT_EQ(r.request_id, 0u);
  EXPECT_TRUE(r.op_unknown);
  EXPECT_EQ(r.encoding, Encoding::binary);
}

TEST_F(ProtocolFindings, TokenizeTakesTextBeyondMaxStringBytes) {
  std::string text;
  while (text.size() < 200 * 1024) text += "Once upon a time there was a little dog. ";
  const TokenizeReply t =
      client_->ok<TokenizeReply>(Op::tokenize, TokenizeRequest{"", text, false});
  const std::vector<int32_t> ids = read_int32(t.tokens, client_->last_frames, "tokens");
  EXPECT_GT(ids.size(), 10000u);
  Frames f;
  const DetokenizeRequest all{"", add_tensor(f, std::span<const int32_t>(ids)), false};
  const auto back = client_->ok<DetokenizeReply>(Op::detokenize, all, f);
  EXPECT_GT(back.text.size(), 150u * 1024);

  // A detokenize whose text would not fit the reply header a client reads.
  std::vector<int32_t> many;
  while (many.size() * 4 < 1200 * 1024 && many.size() + ids.size() <= (1u << 20))
    many.insert(many.end(), ids.begin(), ids.end());
  Frames g;
  const DetokenizeRequest too_many{"", add_tensor(g, std::span<const int32_t>(many)), false};
  const Reply big = client_->call(Op::detokenize, too_many, g);
  EXPECT_FALSE(big.ok);
  EXPECT_EQ(big.error.code, errc::limit_exceeded) << big.error.message;
  EXPECT_TRUE(contains(big.error.message, "max_header_bytes")) << big.error.message;
}

TEST_F(ProtocolFindings, JsonTypeErrorsNameTheField) {
  const std::string h = json_header_with(daemon_->token(), Op::catalog_list,
                                         CatalogListRequest{"", "", "", 50, ""}, "\"limit\": 50",
                                         "\"limit\": \"50\"");
  const Reply r = raw_call(*client_, {h});
  EXPECT_EQ(r.request_id, 77u);
  EXPECT_EQ(r.error.code, errc::bad_request);
  EXPECT_TRUE(contains(r.error.message,
                       "body.limit: expected a non-negative integer (u32), got the string \"50\""))
      << r.error.message;
  EXPECT_FALSE(contains(r.error.message, "rapidjson")) << r.error.message;
}

}  // namespace
}  // namespace spindle::testing
