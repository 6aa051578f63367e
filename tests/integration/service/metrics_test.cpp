// spindled --metrics-port: a real daemon on stories260K scraped by a real HTTP client
// (cpp-httplib). Counters are checked as deltas between two scrapes around known traffic, sent
// with the raw client (which sends no handshake of its own); gauges against the status op.
// Also: the URL on the ready line (after the IPC and TCP endpoints), the content type, 404 for
// other paths, localhost-only binding, and a taken port as a start-up error naming it.

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <httplib.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "daemon.h"
#include "stream_util.h"

namespace spindle::testing {
namespace {

using namespace protocol;

// "http://127.0.0.1:PORT/metrics" -> host, port.
struct Url {
  std::string host;
  int port = 0;
};
Url parse_url(const std::string& url) {
  const std::string prefix = "http://";
  EXPECT_TRUE(url.starts_with(prefix)) << url;
  const size_t colon = url.rfind(':');
  const size_t slash = url.find('/', colon);
  EXPECT_EQ(url.substr(slash), "/metrics") << url;
  return {url.substr(prefix.size(), colon - prefix.size()),
          std::atoi(url.substr(colon + 1, slash - colon - 1).c_str())};
}

// Sample lines of an exposition: `name{labels}` exactly as written -> value.
using Series = std::map<std::string, double>;
Series parse_exposition(const std::string& text) {
  Series out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space == std::string::npos) continue;
    EXPECT_EQ(out.count(line.substr(0, space)), 0u) << "duplicate series: " << line;
    out[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return out;
}

double at(const Series& s, const std::string& key) {
  const auto it = s.find(key);
  if (it == s.end()) {
    ADD_FAILURE() << "no series " << key;
    return std::nan("");
  }
  return it->second;
}
double or_zero(const Series& s, const std::string& key) {
  const auto it = s.find(key);
  return it == s.end() ? 0.0 : it->second;
}
// The sum of a family's samples (every label set).
double family_sum(const Series& s, const std::string& name) {
  double sum = 0;
  for (const auto& [key, v] : s) {
    if (key == name || key.starts_with(name + "{")) sum += v;
  }
  return sum;
}

// A non-loopback IPv4 address of this machine, if it has one.
std::optional<std::string> non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (const ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP)) continue;
    char buf[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf)) found = buf;
  }
  ::freeifaddrs(list);
  return found;
}

class Metrics : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
    daemon_ = std::make_unique<Daemon>(
        fresh_dir("metrics"),
        std::vector<std::string>{"--tcp", "tcp://127.0.0.1:*", "--metrics-port", "-1"});
    client_ = std::make_unique<RawClient>(daemon_->ipc(), daemon_->token());
    ASSERT_EQ(daemon_->endpoints().size(), 3u);
    url_ = parse_url(daemon_->endpoints().back());
    http_ = std::make_unique<httplib::Client>(url_.host, url_.port);
    http_->set_connection_timeout(10, 0);
    http_->set_read_timeout(30, 0);
  }
  void TearDown() override {
    http_.reset();
    if (daemon_) EXPECT_EQ(daemon_->terminate(), 0);
  }

  // GET /metrics: 200 in the Prometheus text format.
  Series scrape() {
    const httplib::Result r = http_->Get("/metrics");
    if (!r) {
      ADD_FAILURE() << "GET /metrics failed: " << httplib::to_string(r.error());
      return {};
    }
    EXPECT_EQ(r->status, 200);
    EXPECT_TRUE(r->get_header_value("Content-Type").starts_with("text/plain; version=0.0.4"))
        << r->get_header_value("Content-Type");
    last_text_ = r->body;
    return parse_exposition(r->body);
  }

  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<RawClient> client_;
  Url url_;
  std::unique_ptr<httplib::Client> http_;
  std::string last_text_;
};

TEST_F(Metrics, CountsEveryRequestOnceByOpAndCode) {
  const Series before = scrape();

  for (int i = 0; i < 3; ++i) client_->ok<StatusReply>(Op::status, Empty{});
  uint64_t tokens = 0;
  for (int i = 0; i < 2; ++i) {
    Frames f;
    const auto req = sample_request("stories260K", {1, 403, 407}, f, 8, 0.0f, 0);
    const auto r = client_->ok<SampleReply>(Op::sample, req, f);
    ASSERT_EQ(r.sequences.size(), 1u);
    tokens += read_int32(r.sequences[0].tokens, client_->last_frames, "tokens").size();
  }
  Frames missing_f;
  const auto missing = sample_request("spindle://local/none@latest", {1, 2}, missing_f, 4, 0.0f, 0);
  EXPECT_EQ(client_->call(Op::sample, missing, missing_f).error.code, errc::not_found);
  // A stream of several messages counts once, at its end.
  Frames stream_f;
  const auto stream_req = sample_request("stories260K", {1, 403}, stream_f, 6, 0.0f, 0);
  const std::vector<Reply> msgs = read_stream(*client_, client_->send(Op::sample_stream, stream_req, stream_f));
  ASSERT_GE(msgs.size(), 2u);
  ASSERT_TRUE(msgs.back().ok);
  for (const auto& seq : std::get<SampleStreamReply>(msgs.back().body).sequences) {
    tokens += read_int32(seq.tokens, msgs.back().frames, "tokens").size();
  }
  EXPECT_EQ(tokens, 2u * 8u + 6u);

  // The scheduler publishes its token count after the engine step that replied: wait for it.
  Series after = scrape();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (at(after, "spindle_sampled_tokens_total") - at(before, "spindle_sampled_tokens_total") <
             double(tokens) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = scrape();
  }
  auto delta = [&](const std::string& key) { return or_zero(after, key) - or_zero(before, key); };
  EXPECT_EQ(delta(R"(spindle_requests_total{op="status",code="ok"})"), 3.0);
  EXPECT_EQ(delta(R"(spindle_requests_total{op="sample",code="ok"})"), 2.0);
  EXPECT_EQ(delta(R"(spindle_requests_total{op="sample",code="not_found"})"), 1.0);
  EXPECT_EQ(delta(R"(spindle_requests_total{op="sample_stream",code="ok"})"), 1.0);
  EXPECT_EQ(family_sum(after, "spindle_requests_total") - family_sum(before, "spindle_requests_total"),
            7.0)
      << last_text_;
  EXPECT_EQ(delta(R"(spindle_errors_total{code="not_found"})"), 1.0);
  EXPECT_EQ(family_sum(after, "spindle_errors_total") - family_sum(before, "spindle_errors_total"),
            1.0);
  EXPECT_EQ(delta("spindle_sampled_tokens_total"), double(tokens));

  // The gauges are the status op's figures.
  const auto s = client_->ok<StatusReply>(Op::status, Empty{});
  const Series now = scrape();
  EXPECT_EQ(at(now, R"(spindle_requests_total{op="status",code="ok"})"),
            at(after, R"(spindle_requests_total{op="status",code="ok"})") + 1.0);
  EXPECT_EQ(at(now, "spindle_queue_depth"), 0.0);
  EXPECT_EQ(at(now, "spindle_parked_requests"), double(s.parked));
  EXPECT_EQ(at(now, "spindle_running_sequences"), double(s.running_sequences));
  EXPECT_EQ(at(now, "spindle_training_sessions"), 0.0);
  EXPECT_GE(at(now, "spindle_tokens_per_second"), 0.0);
  EXPECT_EQ(at(now, R"(spindle_device_slots{state="total"})"), double(s.device_slots));
  EXPECT_EQ(at(now, R"(spindle_device_slots{state="used"})"), double(s.device_slots_used));
  EXPECT_GE(at(now, R"(spindle_cache_hit_ratio{tier="device"})"), 0.0);
  EXPECT_LE(at(now, R"(spindle_cache_hit_ratio{tier="host"})"), 1.0);
  EXPECT_EQ(at(now, "spindle_host_cache_bytes"), double(s.host_cache_bytes));
  EXPECT_EQ(at(now, R"(spindle_adapter_loads{state="queued"})"), double(s.loads_queued));
  EXPECT_EQ(at(now, R"(spindle_adapter_loads{state="running"})"), double(s.loads_running));
  EXPECT_GE(at(now, "spindle_load_wait_seconds_mean"), 0.0);
  EXPECT_EQ(at(now, R"(spindle_adapter_parks_total{cause="cold"})"), double(s.cold_parks));
  EXPECT_EQ(at(now, R"(spindle_adapter_parks_total{cause="busy"})"), double(s.busy_parks));
  EXPECT_EQ(at(now, "spindle_slot_evictions_total"), double(s.slot_evictions));
  EXPECT_EQ(at(now, R"(spindle_device_memory_bytes{kind="base"})"), double(s.base_bytes));
  EXPECT_GT(s.base_bytes, 0u);
  EXPECT_EQ(at(now, R"(spindle_device_memory_bytes{kind="kv"})"), double(s.kv_bytes));
  EXPECT_EQ(at(now, R"(spindle_device_memory_bytes{kind="serving_slots"})"),
            double(s.serving_pool_bytes));
  EXPECT_EQ(at(now, R"(spindle_device_memory_bytes{kind="training_slots"})"),
            double(s.training_pool_bytes));
  EXPECT_GT(at(now, R"(spindle_device_memory_bytes{kind="free"})"), 0.0);
  EXPECT_EQ(at(now, R"(spindle_device_memory_bytes{kind="total"})"), double(s.device_total_bytes));
  EXPECT_EQ(at(now, "spindle_info{version=\"" + std::string(s.server_version).substr(9) +
                        "\",device=\"" + s.device + "\",dtype=\"" + s.dtype + "\"}"),
            1.0)
      << last_text_;
}

// A revision that save_weights just committed resolves from the address cache on its very
// first request (the save put it there); @latest never does.
TEST_F(Metrics, ASavedRevisionResolvesWithoutTheCatalog) {
  CreateTrainingRequest create;
  create.base_model = "stories260K";
  create.policy = "resolved";
  create.rank = 4;
  create.alpha = 8;
  create.seed = 5;
  const auto session = client_->ok<TrainingSessionReply>(Op::create_training, create);
  const auto saved =
      client_->ok<SaveReply>(Op::save_weights, SaveRequest{session.session_id, "", ""});
  ASSERT_EQ(saved.address, "spindle://local/resolved@" + saved.revision_id);
  const Series before = scrape();
  for (const std::string& address :
       {saved.address, saved.address, std::string("spindle://local/resolved@latest")}) {
    Frames f;
    const auto req = sample_request(address, {1, 403, 407}, f, 2, 0.0f, 0);
    EXPECT_EQ(client_->ok<SampleReply>(Op::sample, req, f).revision_id, saved.revision_id);
  }
  const Series after = scrape();
  auto delta = [&](const std::string& key) { return at(after, key) - at(before, key); };
  EXPECT_EQ(delta(R"(spindle_address_resolutions_total{via="cache"})"), 2.0);
  EXPECT_EQ(delta(R"(spindle_address_resolutions_total{via="catalog"})"), 1.0);
}

TEST_F(Metrics, ServesPrometheusTextOnLocalhostOnly) {
  // The ready line: IPC and TCP first (tests read them by index), then the metrics URL.
  EXPECT_TRUE(daemon_->endpoints().at(0).starts_with("ipc://"));
  EXPECT_TRUE(daemon_->endpoints().at(1).starts_with("tcp://"));
  EXPECT_EQ(url_.host, "127.0.0.1");
  EXPECT_GT(url_.port, 0);

  scrape();
  // HELP and TYPE for every family, in that order, before its samples.
  const std::vector<std::pair<std::string, std::string>> families = {
      {"spindle_requests_total", "counter"},   {"spindle_errors_total", "counter"},
      {"spindle_queue_depth", "gauge"},        {"spindle_parked_requests", "gauge"},
      {"spindle_running_sequences", "gauge"},  {"spindle_training_sessions", "gauge"},
      {"spindle_sampled_tokens_total", "counter"}, {"spindle_tokens_per_second", "gauge"},
      {"spindle_device_slots", "gauge"},       {"spindle_cache_hit_ratio", "gauge"},
      {"spindle_host_cache_bytes", "gauge"},   {"spindle_adapter_loads", "gauge"},
      {"spindle_load_wait_seconds_mean", "gauge"}, {"spindle_device_memory_bytes", "gauge"},
      {"spindle_address_resolutions_total", "counter"},
      {"spindle_info", "gauge"}};
  for (const auto& [name, type] : families) {
    const size_t help = last_text_.find("# HELP " + name + " ");
    const size_t type_line = last_text_.find("# TYPE " + name + " " + type + "\n");
    EXPECT_NE(help, std::string::npos) << name;
    EXPECT_NE(type_line, std::string::npos) << name;
    EXPECT_LT(help, type_line) << name;
  }
  EXPECT_EQ(last_text_.back(), '\n');

  for (const char* path : {"/", "/metric", "/metrics/x", "/other"}) {
    const httplib::Result r = http_->Get(path);
    ASSERT_TRUE(r) << path << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 404) << path;
  }
  const httplib::Result post = http_->Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 404);

  // Nothing listens on the machine's other addresses.
  if (const auto other = non_loopback_ipv4()) {
    httplib::Client outside(*other, url_.port);
    outside.set_connection_timeout(3, 0);
    const httplib::Result r = outside.Get("/metrics");
    EXPECT_FALSE(r) << "the metrics endpoint answered on " << *other;
  } else {
    std::cout << "[ note ] no non-loopback IPv4 address: the outside check is skipped\n";
  }
  // Still serving after all that.
  EXPECT_FALSE(scrape().empty());
}

TEST(MetricsStartup, TakenPortIsAStartUpErrorNamingIt) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  // Hold a port on 127.0.0.1, with SO_REUSEPORT: a listener that also set it (httplib's
  // default socket options do) would share the port silently instead of failing.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int yes = 1;
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  // Through the --config file: its key is the flag's name.
  const fs::path dir = fresh_dir("metrics_taken");
  std::ofstream(dir / "config.json") << R"({"metrics-port": )" << port << "}";
  std::string error;
  try {
    Daemon daemon(dir, {"--config", (dir / "config.json").string()});
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  ::close(fd);
  ASSERT_FALSE(error.empty()) << "spindled started on a taken port";
  EXPECT_NE(error.find("--metrics-port " + port + ": cannot listen on 127.0.0.1:" + port),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("in use"), std::string::npos) << error;
  if (const size_t at = error.find("cannot serve"); at != std::string::npos) {
    std::cout << "[ note ] " << error.substr(at);
  }
}

}  // namespace
}  // namespace spindle::testing
