// The client against a real ROUTER socket answering from a thread (ipc in a temp dir, or
// CURVE over tcp://127.0.0.1).

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <unistd.h>

#include "spindle/protocol/client.h"
#include "spindle/protocol/curve.h"

namespace spindle::protocol {
namespace {

struct ServerOptions {
  int overloaded_first = 0;   // refuse this many requests (after the handshake) as overloaded
  bool silent = false;        // answer only the handshake
  size_t collect = 0;         // hold this many status requests, then answer them in reverse
  std::string curve_secret;   // CURVE server when set
};

// A ROUTER on its own thread: the only thread touching its socket.
class TestServer {
 public:
  explicit TestServer(ServerOptions options, std::string endpoint) : options_(std::move(options)) {
    socket_.set(zmq::sockopt::linger, 0);
    if (!options_.curve_secret.empty()) {
      socket_.set(zmq::sockopt::curve_server, 1);
      socket_.set(zmq::sockopt::curve_secretkey, options_.curve_secret);
    }
    socket_.bind(endpoint);
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { run(); });
  }
  ~TestServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  int requests() const { return requests_; }

 private:
  void reply(const std::string& identity, const Reply& r) {
    socket_.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    const std::string header = encode_reply_header(r);
    socket_.send(zmq::buffer(header), r.frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    for (size_t i = 0; i < r.frames.size(); ++i)
      socket_.send(zmq::buffer(r.frames[i]),
                   i + 1 < r.frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }

  void run() {
    std::vector<std::pair<std::string, Reply>> held;
    while (!stop_) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) == 0) continue;
      std::vector<std::string> parts;
      zmq::message_t m;
      do {
        (void)socket_.recv(m);
        parts.push_back(m.to_string());
      } while (m.more());
      const std::string identity = parts[0];
      parts.erase(parts.begin());
      Request q;
      try {
        q = decode_request(parts);
        validate_request(q, Limits{});
      } catch (const ProtocolError& e) {
        reply(identity, make_error_reply(e));
        continue;
      }
      ++requests_;
      Reply r;
      r.encoding = q.encoding;
      r.request_id = q.request_id;
      r.op = q.op;
      if (q.op == Op::handshake) {
        r.body = HandshakeReply{kProtocolVersion, "test-server", "tenant-of-" + q.token};
        reply(identity, r);
        continue;
      }
      if (options_.silent) continue;
      if (overloaded_sent_ < options_.overloaded_first) {
        ++overloaded_sent_;
        Reply e = make_error_reply(q.encoding, q.request_id, q.op, errc::overloaded, "busy");
        e.error.retry_after_ms = 5;
        reply(identity, e);
        continue;
      }
      if (q.op == Op::status) {
        StatusReply s;
        s.queue_depth = q.request_id;
        r.body = s;
      } else if (q.op == Op::sample) {
        const auto& b = std::get<SampleRequest>(q.body);
        std::vector<int32_t> tokens = read_int32(b.prompt, q.frames, "prompt");
        SampleReply s;
        s.revision_id = b.address;
        for (int i = 0; i < b.num_samples; ++i) {
          for (int32_t& t : tokens) t += 1;
          std::vector<float> lp(tokens.size(), -0.5f * float(i));
          s.sequences.push_back({add_tensor(r.frames, std::span<const int32_t>(tokens)),
                                 add_tensor(r.frames, std::span<const float>(lp)), "length",
                                 "text" + std::to_string(i)});
        }
        r.body = s;
      } else if (q.op == Op::catalog_show) {
        r = make_error_reply(q.encoding, q.request_id, q.op, errc::not_found,
                             "no policy " + std::get<AddressRequest>(q.body).address);
      } else {
        r.body = empty_reply_body(q.op);
      }
      if (options_.collect > 0 && q.op == Op::status) {
        held.emplace_back(identity, r);
        if (held.size() == options_.collect) {
          for (auto it = held.rbegin(); it != held.rend(); ++it) reply(it->first, it->second);
          held.clear();
        }
        continue;
      }
      reply(identity, r);
    }
  }

  ServerOptions options_;
  zmq::context_t context_{1};
  zmq::socket_t socket_{context_, zmq::socket_type::router};
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  int overloaded_sent_ = 0;
  std::thread thread_;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("spindle-proto-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string ipc() const { return "ipc://" + (dir_ / "s.sock").string(); }
  ClientOptions options(const std::string& endpoint, Encoding encoding = Encoding::binary) const {
    ClientOptions o;
    o.endpoint = endpoint;
    o.token = "tk";
    o.timeout_ms = 5000;
    o.encoding = encoding;
    return o;
  }
  std::filesystem::path dir_;
};

TEST_F(ClientTest, HandshakeAndSyncCallsInBothEncodings) {
  TestServer server({}, ipc());
  for (Encoding enc : {Encoding::binary, Encoding::json}) {
    Client c(options(server.endpoint(), enc));
    EXPECT_EQ(c.server().server_version, "test-server");
    EXPECT_EQ(c.server().tenant, "tenant-of-tk");
    const StatusReply s = c.status();
    EXPECT_EQ(s.queue_depth, 2u);  // request id 2: the handshake was 1

    const std::vector<int32_t> prompt = {10, 20, 30};
    const SampleResult r = c.sample("spindle://a/p", prompt, 2);
    EXPECT_EQ(r.revision_id, "spindle://a/p");
    ASSERT_EQ(r.sequences.size(), 2u);
    EXPECT_EQ(r.sequences[1].tokens, (std::vector<int32_t>{12, 22, 32}));
    EXPECT_EQ(r.sequences[1].logprobs, (std::vector<float>{-0.5f, -0.5f, -0.5f}));
    EXPECT_EQ(r.sequences[0].text, "text0");
  }
}

TEST_F(ClientTest, ErrorRepliesBecomeClientErrors) {
  TestServer server({}, ipc());
  Client c(options(server.endpoint()));
  try {
    c.catalog_show("spindle://a/missing");
    FAIL();
  } catch (const ClientError& e) {
    EXPECT_EQ(e.code(), errc::not_found);
    EXPECT_NE(std::string(e.what()).find("spindle://a/missing"), std::string::npos);
  }
  try {  // refused by the server's validate_request
    c.sample("spindle://a/p", std::vector<int32_t>{1}, /*num_samples=*/0);
    FAIL();
  } catch (const ClientError& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("num_samples"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(c.status());  // the socket is still usable
}

TEST_F(ClientTest, ManyInFlightRepliesInAnyOrder) {
  constexpr size_t kN = 64;
  TestServer server({.collect = kN}, ipc());
  Client c(options(server.endpoint()));
  std::set<uint64_t> sent;
  for (size_t i = 0; i < kN; ++i) sent.insert(c.send(Op::status, Empty{}));
  EXPECT_EQ(sent.size(), kN);
  std::set<uint64_t> got;
  uint64_t first = 0;
  while (got.size() < kN) {
    std::optional<Reply> r = c.receive(5000);
    ASSERT_TRUE(r);
    ASSERT_TRUE(r->ok);
    EXPECT_EQ(std::get<StatusReply>(r->body).queue_depth, r->request_id);
    if (got.empty()) first = r->request_id;
    got.insert(r->request_id);
  }
  EXPECT_EQ(got, sent);
  EXPECT_EQ(first, *sent.rbegin()) << "the server answered in reverse";
  EXPECT_FALSE(c.receive(50));
}

TEST_F(ClientTest, SyncCallKeepsAsyncRepliesForReceive) {
  TestServer server({}, ipc());
  Client c(options(server.endpoint()));
  const uint64_t a = c.send(Op::status, Empty{});
  const uint64_t b = c.send(Op::capabilities, Empty{});
  EXPECT_NO_THROW(c.status());  // its reply arrives after a's and b's
  std::set<uint64_t> got;
  for (int i = 0; i < 2; ++i) {
    std::optional<Reply> r = c.receive(5000);
    ASSERT_TRUE(r);
    got.insert(r->request_id);
  }
  EXPECT_EQ(got, (std::set<uint64_t>{a, b}));
}

TEST_F(ClientTest, OverloadedIsRetriedThenSucceeds) {
  TestServer server({.overloaded_first = 3}, ipc());
  Client c(options(server.endpoint()));
  const StatusReply s = c.status();
  EXPECT_EQ(s.queue_depth, 5u);  // ids 2, 3, 4 refused; 5 served
  EXPECT_EQ(server.requests(), 5);
}

TEST_F(ClientTest, OverloadedRetriesAreBounded) {
  TestServer server({.overloaded_first = 10}, ipc());
  ClientOptions o = options(server.endpoint());
  o.max_overloaded_retries = 2;
  Client c(o);
  try {
    c.status();
    FAIL();
  } catch (const ClientError& e) {
    EXPECT_EQ(e.code(), errc::overloaded);
  }
  EXPECT_EQ(server.requests(), 4);  // handshake + 3 attempts
}

TEST_F(ClientTest, NoReplyIsATimeout) {
  TestServer server({.silent = true}, ipc());
  ClientOptions o = options(server.endpoint());
  // The handshake (answered) must fit in the same timeout: 1 s leaves room on a loaded machine.
  o.timeout_ms = 1000;
  Client c(o);
  try {
    c.status();
    FAIL();
  } catch (const ClientError& e) {
    EXPECT_EQ(e.code(), "timeout");
  }
  EXPECT_EQ(server.requests(), 2) << "the handshake and the unanswered status";
}

TEST_F(ClientTest, NoServerFailsTheHandshakeWithTimeout) {
  ClientOptions o = options(ipc());
  o.timeout_ms = 200;
  try {
    Client c(o);
    FAIL();
  } catch (const ClientError& e) {
    EXPECT_EQ(e.code(), "timeout");
  }
}

TEST_F(ClientTest, CurveOverTcp) {
  const CurveKeyPair server_keys = curve_keypair();
  TestServer server({.curve_secret = server_keys.secret_key}, "tcp://127.0.0.1:*");
  ClientOptions o = options(server.endpoint());
  o.server_public_key = server_keys.public_key;
  Client c(o);  // ephemeral client keys
  EXPECT_EQ(c.status().queue_depth, 2u);

  const CurveKeyPair mine = curve_keypair();
  o.client_public_key = mine.public_key;
  o.client_secret_key = mine.secret_key;
  Client with_keys(o);
  EXPECT_EQ(with_keys.server().tenant, "tenant-of-tk");

  o.server_public_key = curve_keypair().public_key;  // not the server's
  o.timeout_ms = 500;
  try {
    Client wrong(o);
    FAIL();
  } catch (const ClientError& e) {
    EXPECT_EQ(e.code(), "timeout");
  }
  // Plain text to a CURVE server never gets through either.
  o.server_public_key.clear();
  EXPECT_THROW(Client plain(o), ClientError);
}

TEST_F(ClientTest, KeyFiles) {
  const CurveKeyPair a = load_or_create_keypair(dir_ / "keys", "server");
  EXPECT_TRUE(is_z85_key(a.public_key));
  EXPECT_TRUE(is_z85_key(a.secret_key));
  EXPECT_EQ(curve_public_key(a.secret_key), a.public_key);
  const auto perms = std::filesystem::status(dir_ / "keys" / "server.key").permissions();
  EXPECT_EQ(perms & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  // Loading again returns the same pair; a deleted .pub is rewritten.
  std::filesystem::remove(dir_ / "keys" / "server.pub");
  const CurveKeyPair b = load_or_create_keypair(dir_ / "keys", "server");
  EXPECT_EQ(a.secret_key, b.secret_key);
  EXPECT_EQ(a.public_key, b.public_key);
  EXPECT_EQ(read_public_keys(dir_ / "keys" / "server.pub"), std::vector<std::string>{a.public_key});

  const CurveKeyPair c = curve_keypair();
  {
    std::ofstream f(dir_ / "clients.txt");
    f << "# allowed clients\n\n  " << a.public_key << "  \n# " << c.public_key << "\n"
      << c.public_key << "\n";
  }
  EXPECT_EQ(read_public_keys(dir_ / "clients.txt"),
            (std::vector<std::string>{a.public_key, c.public_key}));
  {
    std::ofstream f(dir_ / "bad.txt");
    f << a.public_key << "\nnot-a-key\n";
  }
  try {
    read_public_keys(dir_ / "bad.txt");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spindle::protocol
