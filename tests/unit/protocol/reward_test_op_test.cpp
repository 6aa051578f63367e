// The reward_test op: validation rules (code and field path in the message) and a JSON round
// trip of a reply whose completion text is not valid UTF-8. The generic round trips of every
// op in both encodings (codec_roundtrip_test.cpp) cover its sample in message_samples.h.

#include <gtest/gtest.h>

#include <functional>

#include "message_samples.h"

namespace spindle::protocol {
namespace {

using testing::sample_request;

ProtocolError invalid(const std::function<void(RewardTestRequest&)>& edit, const Limits& l = {}) {
  Request r = sample_request(Op::reward_test);
  edit(std::get<RewardTestRequest>(r.body));
  try {
    validate_request(r, l);
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.op, Op::reward_test);
    return e;
  }
  ADD_FAILURE() << "validated";
  return ProtocolError("none", "none");
}

#define EXPECT_REWARD_TEST_INVALID(wire_code, text, edit, ...)                     \
  do {                                                                             \
    const ProtocolError e_ = invalid(edit __VA_OPT__(, ) __VA_ARGS__);             \
    EXPECT_EQ(e_.code(), wire_code) << e_.what();                                  \
    EXPECT_NE(std::string(e_.what()).find(text), std::string::npos) << e_.what(); \
  } while (0)

TEST(RewardTestOp, NameAndBodies) {
  EXPECT_STREQ(op_name(Op::reward_test), "reward_test");
  EXPECT_EQ(op_from_name("reward_test"), Op::reward_test);
  EXPECT_TRUE(std::holds_alternative<RewardTestRequest>(empty_request_body(Op::reward_test)));
  EXPECT_TRUE(std::holds_alternative<RewardTestReply>(empty_reply_body(Op::reward_test)));
  // Appended: the ops before it keep their numbers.
  EXPECT_EQ(int(Op::reward_test), int(Op::run_resume) + 1);
}

TEST(RewardTestOp, Validation) {
  EXPECT_NO_THROW(validate_request(sample_request(Op::reward_test), {}));
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "spec_json: must not be empty",
                             [](RewardTestRequest& b) { b.spec_json.clear(); });
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "address: must not be empty",
                             [](RewardTestRequest& b) { b.address.clear(); });
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "rows: needs at least one row",
                             [](RewardTestRequest& b) { b.rows.clear(); });
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "rows[1].prompt: must not be empty",
                             [](RewardTestRequest& b) { b.rows[1].prompt.clear(); });
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "num_samples: 0 is below 1",
                             [](RewardTestRequest& b) { b.num_samples = 0; });
  EXPECT_REWARD_TEST_INVALID(errc::limit_exceeded, "num_samples: 65 exceeds the limit 64",
                             [](RewardTestRequest& b) { b.num_samples = 65; });
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "sampling_params.max_tokens: -1 is below 0",
                             [](RewardTestRequest& b) { b.sampling_params.max_tokens = -1; });
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "sampling_params.top_p",
                             [](RewardTestRequest& b) { b.sampling_params.top_p = 0.0f; });
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "sampling_params.temperature",
                             [](RewardTestRequest& b) { b.sampling_params.temperature = -1.0f; });
  EXPECT_REWARD_TEST_INVALID(errc::invalid_argument, "bins: 0 is below 1",
                             [](RewardTestRequest& b) { b.bins = 0; });
  EXPECT_REWARD_TEST_INVALID(errc::limit_exceeded, "bins: 1001 exceeds the limit 1000",
                             [](RewardTestRequest& b) { b.bins = 1001; });
}

TEST(RewardTestOp, RowsTimesSamplesLimit) {
  Limits l;
  l.max_reward_test_samples = 6;  // the sample: 2 rows x 3 samples = 6, at the limit
  EXPECT_NO_THROW(validate_request(sample_request(Op::reward_test), l));
  EXPECT_REWARD_TEST_INVALID(
      errc::limit_exceeded, "rows: 3 rows x 3 samples = 9 completions, limit 6 (max_reward_test_samples)",
      [](RewardTestRequest& b) { b.rows.push_back(b.rows[0]); }, l);
  // The default limit: 17 rows x 64 samples = 1088 > 1024.
  EXPECT_REWARD_TEST_INVALID(errc::limit_exceeded, "limit 1024", [](RewardTestRequest& b) {
    b.num_samples = 64;
    b.rows.resize(17, b.rows[0]);
  });
}

TEST(RewardTestOp, StringLimits) {
  Limits l;
  l.max_string_bytes = 32;
  // spec_json may be as long as a header (like run_start's config_json); other strings may not.
  EXPECT_REWARD_TEST_INVALID(errc::limit_exceeded, "rows[0].metadata_json: 40 bytes, limit 32",
                             [](RewardTestRequest& b) {
                               b.spec_json = std::string(100, ' ') + "{}";
                               b.rows[0].prompt = "p";
                               b.rows[1].prompt = "q";
                               b.rows[1].reference = "r";
                               b.address = "base";
                               b.sampling_params.stop_strings.clear();
                               b.rows[0].metadata_json = std::string(40, 'x');
                             },
                             l);
}

TEST(RewardTestOp, JsonReplyRepairsInvalidUtf8Text) {
  Reply r = testing::sample_reply(Op::reward_test, Encoding::json);
  std::get<RewardTestReply>(r.body).samples[0].text = std::string("cut \xe2\x9c", 6);
  const Reply back = decode_reply(testing::encode_parts(r));
  const auto& b = std::get<RewardTestReply>(back.body);
  EXPECT_EQ(b.samples[0].text, "cut \xef\xbf\xbd\xef\xbf\xbd");  // one U+FFFD per byte
  EXPECT_EQ(b.samples[1], std::get<RewardTestReply>(r.body).samples[1]);
  EXPECT_EQ(b.total, std::get<RewardTestReply>(r.body).total);
}

}  // namespace
}  // namespace spindle::protocol
