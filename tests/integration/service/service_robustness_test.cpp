// Malformed input, overload and shutdown: typed errors, nothing lost, the daemon keeps serving.

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

TEST(ServiceRobustness, MalformedRequestsGetTypedErrors) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  Daemon daemon(fresh_dir("malformed"), {"--max-frame-bytes", "4096"});
  const std::string token = daemon.token();
  RawClient c(daemon.ipc(), token);

  c.send_raw({"garbage that is no header"});
  auto r = c.receive(5000);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error.code, errc::bad_request);

  c.send_raw({"B\x01\x02"});  // a binary archive cut short
  r = c.receive(5000);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->error.code, errc::bad_request);

  Request old;
  old.protocol_version = 99;
  old.request_id = 5;
  old.token = token;
  old.body = HandshakeRequest{"old"};
  c.send_raw({encode_request_header(old)});
  r = c.receive(5000);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->error.code, errc::unsupported_version);
  EXPECT_EQ(r->request_id, 5u);

  Request unknown;
  unknown.encoding = Encoding::json;
  unknown.request_id = 6;
  unknown.token = token;
  unknown.body = HandshakeRequest{"x"};
  std::string header = encode_request_header(unknown);
  const auto at = header.find("\"handshake\"");
  ASSERT_NE(at, std::string::npos);
  header.replace(at, 11, "\"no_such_op\"");
  c.send_raw({header});
  r = c.receive(5000);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->error.code, errc::unknown_op);
  EXPECT_EQ(r->request_id, 6u);

  Frames big;
  const std::vector<int32_t> long_prompt(2000, 5);  // 8000 bytes > --max-frame-bytes 4096
  const auto oversized = sample_request("stories260K", long_prompt, big, 4, 0.0f, 0);
  EXPECT_EQ(c.call(Op::sample, oversized, big).error.code, errc::limit_exceeded);

  Frames f1, f2, f3;
  const auto bad_addr = sample_request("spindle://has space/p", {1, 2}, f1, 4, 0.0f, 0);
  EXPECT_EQ(c.call(Op::sample, bad_addr, f1).error.code, errc::invalid_argument);
  const auto no_base = sample_request("no-such-base", {1, 2}, f2, 4, 0.0f, 0);
  EXPECT_EQ(c.call(Op::sample, no_base, f2).error.code, errc::not_found);
  const auto no_policy = sample_request("spindle://local/none@latest", {1, 2}, f3, 4, 0.0f, 0);
  EXPECT_EQ(c.call(Op::sample, no_policy, f3).error.code, errc::not_found);
  EXPECT_EQ(c.call(Op::catalog_show, AddressRequest{"spindle://local/x@nothex!"}).error.code,
            errc::invalid_argument);
  EXPECT_EQ(c.call(Op::forward_backward, ForwardBackwardRequest{"s-none", {}, "cross_entropy", {}})
                .error.code.empty(),
            false);

  // Still serving.
  EXPECT_EQ(c.ok<HandshakeReply>(Op::handshake, HandshakeRequest{"after"}).tenant, "local");
  Frames ok;
  const auto fine = sample_request("stories260K", {1, 2}, ok, 4, 0.0f, 0);
  EXPECT_EQ(c.ok<SampleReply>(Op::sample, fine, ok).sequences.size(), 1u);
  EXPECT_EQ(daemon.terminate(), 0);
  EXPECT_NE(daemon.log().find("answered bad_request"), std::string::npos);  // logged once each
}

TEST(ServiceRobustness, OverloadAnswersEveryRequest) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  Daemon daemon(fresh_dir("overload"), {"--max-queue", "2", "--retry-after-ms", "7"});
  RawClient c(daemon.ipc(), daemon.token());
  constexpr int kRequests = 24;
  std::set<uint64_t> ids;
  for (int i = 0; i < kRequests; ++i) {
    Frames f;
    const auto req = sample_request("stories260K", {1, 400, 30}, f, 64, 1.0f, uint64_t(i), 2);
    ids.insert(c.send(Op::sample, req, f));
  }
  int ok = 0, overloaded = 0;
  for (int i = 0; i < kRequests; ++i) {
    const auto r = c.receive(60000);
    ASSERT_TRUE(r.has_value()) << "reply " << i << " missing";
    EXPECT_EQ(ids.erase(r->request_id), 1u);
    if (r->ok) {
      ++ok;
    } else {
      EXPECT_EQ(r->error.code, errc::overloaded);
      EXPECT_EQ(r->error.queue_limit, 2u);
      EXPECT_EQ(r->error.retry_after_ms, 7u);
      ++overloaded;
    }
  }
  EXPECT_GE(ok, 2);
  EXPECT_GE(overloaded, 1);
  EXPECT_TRUE(ids.empty());
  EXPECT_EQ(daemon.terminate(), 0);
}

TEST(ServiceRobustness, SigtermFinishesInFlightWork) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  Daemon daemon(fresh_dir("sigterm"), {});
  RawClient c(daemon.ipc(), daemon.token());
  constexpr int kRequests = 8;
  std::set<uint64_t> ids;
  for (int i = 0; i < kRequests; ++i) {
    Frames f;
    const auto req = sample_request("stories260K", {1, 400, 30}, f, 96, 1.0f, uint64_t(i), 2);
    ids.insert(c.send(Op::sample, req, f));
  }
  // Requests on one connection are read in order: once status is answered, every sample
  // before it has been admitted.
  const uint64_t status_id = c.send(Op::status, Empty{});
  for (;;) {
    auto r = c.receive(60000);
    ASSERT_TRUE(r.has_value());
    if (r->request_id == status_id) break;
    EXPECT_TRUE(r->ok);
    ids.erase(r->request_id);
  }
  std::thread stopper([&] { EXPECT_EQ(daemon.terminate(), 0); });
  while (!ids.empty()) {
    const auto r = c.receive(60000);
    ASSERT_TRUE(r.has_value()) << ids.size() << " replies missing";
    EXPECT_TRUE(r->ok) << r->error.code << ": " << r->error.message;
    EXPECT_EQ(ids.erase(r->request_id), 1u);
  }
  stopper.join();
}

}  // namespace
}  // namespace spindle::testing
