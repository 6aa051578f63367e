// One error policy end to end (issue 16): every error that reaches a client is logged once, in
// the one place every reply path passes (ReplyChannel::encode_counted), with its request id,
// op, tenant, wire code and message: a refusal before authentication, typed errors from the
// catalog, the session table and the service's own checks (spindle::Error throughout).

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(ErrorsLogged, EveryErrorReplyIsLoggedOnceWithItsRequestId) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  Daemon daemon(fresh_dir("errors_logged"), {});
  RawClient client(daemon.ipc(), daemon.token());
  RawClient stranger(daemon.ipc(), "not-a-token");

  const uint64_t unauth_id = stranger.send(Op::catalog_list, CatalogListRequest{});
  ASSERT_TRUE(stranger.receive(10000).has_value());
  for (int i = 0; i < 3; ++i) client.ok<HandshakeReply>(Op::handshake, HandshakeRequest{"t"});
  const Reply missing = client.call(Op::catalog_show, AddressRequest{"spindle://local/nothing"});
  ASSERT_EQ(missing.error.code, errc::not_found);
  const Reply closed = client.call(Op::close_training, SessionRequest{"no-such-session"});
  ASSERT_FALSE(closed.ok);
  // A typed error from business code: tokenize on a base this server does not serve.
  TokenizeRequest tok;
  tok.base_model = "no-such-base";
  tok.text = "hi";
  const Reply unserved = client.call(Op::tokenize, tok);
  ASSERT_FALSE(unserved.ok);
  EXPECT_EQ(daemon.terminate(), 0);

  const std::string log = daemon.log();
  const auto line = [](uint64_t id, const char* op) {
    return "request " + std::to_string(id) + " (" + op + ")";
  };
  // Each exactly once (the log file and stderr both hold every line: count in the file only).
  const std::string file = read_text(daemon.data_dir() / "logs" / "spindled.log");
  EXPECT_EQ(count_of(file, line(unauth_id, "catalog_list") + " on socket 0 answered unauthenticated"), 1u)
      << file;
  EXPECT_EQ(count_of(file, line(missing.request_id, "catalog_show") + " on socket 0 tenant local answered not_found"), 1u)
      << file;
  EXPECT_EQ(count_of(file, line(closed.request_id, "close_training") + " on socket 0 tenant local answered"), 1u) << file;
  EXPECT_EQ(count_of(file, line(unserved.request_id, "tokenize") + " on socket 0 tenant local answered " +
                               unserved.error.code),
            1u)
      << file;
  EXPECT_NE(file.find(unserved.error.message), std::string::npos) << file;
  // Successes are not logged as errors.
  EXPECT_EQ(count_of(file, "(handshake) on socket"), 0u) << file;
}

}  // namespace
}  // namespace spindle::testing
