// Authentication and tenancy: tokens, tenant isolation, TCP with CURVE and its allow-list.

#include <zmq.h>

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

std::pair<std::string, std::string> keypair() {
  char pub[41], sec[41];
  EXPECT_EQ(zmq_curve_keypair(pub, sec), 0);
  return {pub, sec};
}

TEST(ServiceSecurity, TokensAndTenantIsolation) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  Daemon daemon(two_tenant_dir("tenants"), {});
  RawClient wrong(daemon.ipc(), "not-a-token-at-all");
  const Reply refused = wrong.call(Op::handshake, HandshakeRequest{"x"});
  ASSERT_FALSE(refused.ok);
  EXPECT_EQ(refused.error.code, errc::unauthenticated);

  RawClient alice(daemon.ipc(), kTokenA), bob(daemon.ipc(), kTokenB);
  EXPECT_EQ(alice.ok<HandshakeReply>(Op::handshake, HandshakeRequest{"a"}).tenant, "alice");
  EXPECT_EQ(bob.ok<HandshakeReply>(Op::handshake, HandshakeRequest{"b"}).tenant, "bob");
  CreateTrainingRequest create;
  create.policy = "secret";
  create.rank = 2;
  const auto s = alice.ok<TrainingSessionReply>(Op::create_training, create);
  const auto saved = alice.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "", ""});

  // Bob sees nothing of Alice's: catalog, sampling, forking, her session.
  EXPECT_TRUE(bob.ok<PolicyListReply>(Op::catalog_list, CatalogListRequest{}).policies.empty());
  const Reply show = bob.call(Op::catalog_show, AddressRequest{saved.address});
  EXPECT_EQ(show.error.code, errc::not_found);
  Frames f;
  const auto sreq = sample_request(saved.address, {1, 2, 3}, f, 4, 0.0f, 0);
  EXPECT_EQ(bob.call(Op::sample, sreq, f).error.code, errc::not_found);
  EXPECT_EQ(bob.call(Op::catalog_fork, ForkRequest{saved.address, "mine"}).error.code, errc::not_found);
  EXPECT_EQ(bob.call(Op::save_weights, SaveRequest{s.session_id, "", ""}).error.code, errc::not_found);
  // Refusals for another tenant are the same as for a missing policy.
  const Reply missing = bob.call(Op::catalog_show, AddressRequest{"spindle://alice/nothing"});
  EXPECT_EQ(missing.error.code, errc::not_found);
  // Alice still can.
  Frames g;
  const auto areq = sample_request(saved.address, {1, 2, 3}, g, 4, 0.0f, 0);
  EXPECT_EQ(alice.ok<SampleReply>(Op::sample, areq, g).revision_id, saved.revision_id);
  EXPECT_EQ(daemon.terminate(), 0);
  const std::string log = daemon.log();
  EXPECT_NE(log.find("unauthenticated"), std::string::npos);
  EXPECT_NE(log.find("another tenant's address"), std::string::npos);
}

TEST(ServiceSecurity, TcpCurveAllowList) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("curve");
  const auto [allowed_pub, allowed_sec] = keypair();
  const auto [other_pub, other_sec] = keypair();
  fs::create_directories(dir / "curve");
  std::ofstream(dir / "curve" / "authorized_clients") << "# test client\n" << allowed_pub << "\n";
  Daemon daemon(dir, {"--tcp", "tcp://127.0.0.1:*"});
  std::string server_pub = read_text(dir / "curve" / "server.pub");
  server_pub.resize(40);
  const std::string token = daemon.token();

  RawClient good(daemon.tcp(), token, CurveKeys{server_pub, allowed_pub, allowed_sec});
  EXPECT_EQ(good.ok<HandshakeReply>(Op::handshake, HandshakeRequest{"curve"}).tenant, "local");
  Frames f;
  const auto req = sample_request("stories260K", {1, 400, 30}, f, 5, 0.0f, 0);
  EXPECT_EQ(good.ok<SampleReply>(Op::sample, req, f).sequences.size(), 1u);

  RawClient stranger(daemon.tcp(), token, CurveKeys{server_pub, other_pub, other_sec});
  stranger.send(Op::handshake, HandshakeRequest{"stranger"});
  EXPECT_FALSE(stranger.receive(1500).has_value());

  RawClient plain(daemon.tcp(), token);
  plain.send(Op::handshake, HandshakeRequest{"plain"});
  EXPECT_FALSE(plain.receive(1500).has_value());

  // The allowed client is still served.
  EXPECT_EQ(good.ok<HandshakeReply>(Op::handshake, HandshakeRequest{"again"}).tenant, "local");
  EXPECT_EQ(daemon.terminate(), 0);
  EXPECT_NE(daemon.log().find("refused CURVE client " + other_pub), std::string::npos);
}

}  // namespace
}  // namespace spindle::testing
