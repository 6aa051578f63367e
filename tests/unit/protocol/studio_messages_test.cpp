// The Studio's messages (messages_studio.h) beyond the every-op round trips: the stream rule
// (is_final_reply, is_stream_op), a non-final stream message in both encodings, text pieces
// that split a character, validation of the new request bodies.

#include <gtest/gtest.h>

#include "message_samples.h"

namespace spindle::protocol {
namespace {

using testing::encode_parts;
using testing::sample_reply;
using testing::sample_request;

TEST(StudioMessages, StreamOps) {
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = Op(i);
    EXPECT_EQ(is_stream_op(op), op == Op::sample_stream || op == Op::subscribe) << op_name(op);
  }
}

TEST(StudioMessages, FinalReplies) {
  Reply r = sample_reply(Op::sample_stream);
  EXPECT_TRUE(is_final_reply(r));
  std::get<SampleStreamReply>(r.body).final = false;
  EXPECT_FALSE(is_final_reply(r));
  Reply e = sample_reply(Op::subscribe);
  EXPECT_FALSE(is_final_reply(e));  // an event
  std::get<EventReply>(e.body).final = true;
  EXPECT_TRUE(is_final_reply(e));
  // Errors end streams; other ops always answer once.
  EXPECT_TRUE(is_final_reply(make_error_reply(Encoding::binary, 1, Op::subscribe, errc::internal, "x")));
  EXPECT_TRUE(is_final_reply(sample_reply(Op::sample)));
  EXPECT_TRUE(is_final_reply(sample_reply(Op::unsubscribe)));
}

TEST(StudioMessages, NonFinalMessagesRoundTrip) {
  for (Encoding enc : {Encoding::binary, Encoding::json}) {
    Reply r = sample_reply(Op::sample_stream, enc);
    auto& body = std::get<SampleStreamReply>(r.body);
    body.final = false;
    body.sequences.clear();
    const Reply back = decode_reply(encode_parts(r));
    EXPECT_EQ(std::get<SampleStreamReply>(back.body), body);
    EXPECT_EQ(back.frames, r.frames);
    EXPECT_FALSE(is_final_reply(back));

    Reply closed = sample_reply(Op::subscribe, enc);
    closed.body = EventReply{true, "closed", {}, {}};
    const Reply cb = decode_reply(encode_parts(closed));
    EXPECT_EQ(std::get<EventReply>(cb.body).topic, "closed");
    EXPECT_TRUE(is_final_reply(cb));
  }
}

// A byte-level BPE token may end inside a UTF-8 character: its piece travels as raw bytes in
// binary (the pieces still concatenate to the character) and as U+FFFD per byte in JSON.
TEST(StudioMessages, SplitCharacterPieces) {
  for (Encoding enc : {Encoding::binary, Encoding::json}) {
    Reply r = sample_reply(Op::sample_stream, enc);
    auto& body = std::get<SampleStreamReply>(r.body);
    body.final = false;
    body.sequences.clear();
    body.deltas[0].pieces = {" \xe2\x9c", "\x93"};  // " ✓" split after two of its bytes
    const Reply back = decode_reply(encode_parts(r));
    const auto& pieces = std::get<SampleStreamReply>(back.body).deltas.at(0).pieces;
    ASSERT_EQ(pieces.size(), 2u);
    if (enc == Encoding::binary) {
      EXPECT_EQ(pieces[0] + pieces[1], " ✓");
    } else {
      EXPECT_EQ(pieces[0], " \xef\xbf\xbd\xef\xbf\xbd");
      EXPECT_EQ(pieces[1], "\xef\xbf\xbd");
    }
  }
}

ProtocolError invalid(Request r) {
  try {
    validate_request(r, {});
  } catch (const ProtocolError& e) {
    return e;
  }
  ADD_FAILURE() << "validated";
  return ProtocolError("none", "none");
}

TEST(StudioMessages, Validation) {
  Request d = sample_request(Op::datasets);
  std::get<DatasetsRequest>(d.body).examples = 21;
  EXPECT_EQ(invalid(d).code(), errc::limit_exceeded);
  EXPECT_NE(std::string(invalid(d).what()).find("examples"), std::string::npos);

  Request s = sample_request(Op::subscribe);
  std::get<SubscribeRequest>(s.body).topics = {"metrics", "gossip"};
  const ProtocolError topic = invalid(s);
  EXPECT_EQ(topic.code(), errc::invalid_argument);
  EXPECT_NE(std::string(topic.what()).find("topics[1]"), std::string::npos) << topic.what();
  std::get<SubscribeRequest>(s.body).topics = {};
  EXPECT_NO_THROW(validate_request(s, {}));

  Request u = sample_request(Op::unsubscribe);
  std::get<UnsubscribeRequest>(u.body).subscription = 0;
  EXPECT_EQ(invalid(u).code(), errc::invalid_argument);

  // sample_stream is checked exactly as sample.
  Request ss = sample_request(Op::sample_stream);
  std::get<SampleRequest>(ss.body).num_samples = 0;
  Request sa = sample_request(Op::sample);
  std::get<SampleRequest>(sa.body) = std::get<SampleRequest>(ss.body);
  sa.frames = ss.frames;
  EXPECT_EQ(invalid(ss).code(), invalid(sa).code());
  EXPECT_STREQ(invalid(ss).what(), invalid(sa).what());
}

}  // namespace
}  // namespace spindle::protocol
