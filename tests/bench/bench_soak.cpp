// spindle-bench soak: many concurrent clients against one real spindled on loopback IPC for a
// bounded time, with mixed ops: sampling from random adapters, compute_logprobs, training
// sessions (forward_backward, optim_step, save_weights), catalog pages, status, reward tests,
// malformed frames and clients that disconnect mid-request. Prints:
//   lost_replies   requests on sockets still open that never got a reply (goal 0);
//   rss_growth_mb  the daemon's RSS at the end minus at the baseline (minute 2, or a fifth of
//                  a shorter run), and that as a percentage of the baseline (goal < 5 %);
//   p50/p99 latency per op, and errors_by_code (every reply counted by its wire code).
// Each client is one raw DEALER socket with at most one request in flight; worker threads each
// poll their share of the sockets (so 1000 clients need no 1000 threads).

#include <CLI/CLI.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "spindled_process.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/protocol/client.h"
#include "spindle/protocol/wire.h"

namespace spindle::bench {
namespace {

namespace fs = std::filesystem;
using namespace protocol;
using spindle::testing::SpindledProcess;

struct SoakOptions {
  fs::path shared_dir;
  fs::path spindled;
  double seconds = 60.0;
  int clients = 64;
  int adapters = 8;
  int trainers = 4;  // clients that own a training session (at most --max-sessions)
  int threads = 4;
  uint64_t seed = 1;
  // Ops in the mix (all by default): sample, logprobs, catalog, status, reward, malformed,
  // disconnect, stream; a disabled op's share goes to status. Trainers always train.
  std::string mix = "sample,logprobs,catalog,status,reward,malformed,disconnect,stream";
  bool enabled(const std::string& op) const { return ("," + mix + ",").find("," + op + ",") != std::string::npos; }
  double rss_every_s = 0.0;  // > 0: print the daemon's RSS that often
  int64_t kv_blocks = 0;     // > 0: spindled --kv-blocks (its KV pool is paged in as used)
  int64_t catalog_cache_mib = 0;  // > 0: spindled --catalog-cache-mib
};

double rss_mb(pid_t pid) { return vm_status_bytes("VmRSS", int(pid)) / 1048576.0; }

// What every worker adds to, merged at the end.
struct Tally {
  std::map<std::string, std::vector<double>> latency_ms;  // by op
  std::map<std::string, uint64_t> codes;                  // "ok" or the wire error code
  std::map<std::string, std::string> examples;            // "op code" -> its first message
  uint64_t sent = 0, abandoned = 0, lost = 0, malformed = 0;
  void merge(const Tally& o) {
    for (const auto& [op, v] : o.latency_ms) latency_ms[op].insert(latency_ms[op].end(), v.begin(), v.end());
    for (const auto& [c, n] : o.codes) codes[c] += n;
    for (const auto& [k, m] : o.examples) examples.emplace(k, m);
    sent += o.sent;
    abandoned += o.abandoned;
    lost += o.lost;
    malformed += o.malformed;
  }
};

struct Fixture {
  std::string endpoint, token;
  std::vector<std::string> adapters;  // revision addresses
  std::vector<std::string> sessions;  // one per trainer client
  std::vector<int32_t> prompt;        // "Once upon a time"
};

// One simulated client: a DEALER socket and its request in flight.
struct SimClient {
  std::unique_ptr<zmq::socket_t> socket;
  uint64_t in_flight = 0;  // request id, 0 = idle
  std::string op;
  Clock::time_point sent_at;
  int trainer = -1;  // index into Fixture::sessions, or -1
  int train_phase = 0;
};

class Worker {
 public:
  Worker(zmq::context_t& ctx, const Fixture& f, const SoakOptions& o, int first, int count,
         uint64_t seed)
      : ctx_(ctx), f_(f), o_(o), rng_(seed) {
    for (int i = 0; i < count; ++i) {
      SimClient c;
      c.socket = connect();
      const int index = first + i;
      if (index < int(f.sessions.size())) c.trainer = index;
      clients_.push_back(std::move(c));
    }
  }

  void run(const std::atomic<bool>& stop_sending, Clock::time_point drain_deadline) {
    std::vector<zmq::pollitem_t> items(clients_.size());
    for (;;) {
      const bool sending = !stop_sending.load();
      bool any_in_flight = false;
      for (auto& c : clients_) {
        if (sending && c.in_flight == 0) send_next(c);
        any_in_flight |= c.in_flight != 0;
      }
      if (!sending && (!any_in_flight || Clock::now() > drain_deadline)) break;
      for (size_t i = 0; i < clients_.size(); ++i)
        items[i] = {clients_[i].socket->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50));
      for (size_t i = 0; i < clients_.size(); ++i) {
        if (items[i].revents & ZMQ_POLLIN) receive(clients_[i]);
      }
    }
    for (auto& c : clients_) tally_.lost += c.in_flight != 0 ? 1 : 0;
  }

  const Tally& tally() const { return tally_; }

 private:
  std::unique_ptr<zmq::socket_t> connect() {
    auto s = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    s->connect(f_.endpoint);
    return s;
  }

  uint64_t send(SimClient& c, Op op, RequestBody body, Frames frames = {}) {
    Request r;
    r.request_id = ++next_id_;
    r.token = f_.token;
    r.op = op;
    r.body = std::move(body);
    r.frames = std::move(frames);
    std::vector<std::string> parts = {encode_request_header(r)};
    parts.insert(parts.end(), r.frames.begin(), r.frames.end());
    for (size_t i = 0; i < parts.size(); ++i) {
      c.socket->send(zmq::buffer(parts[i]),
                     i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    c.in_flight = r.request_id;
    c.op = op_name(op);
    c.sent_at = Clock::now();
    ++tally_.sent;
    return r.request_id;
  }

  SampleRequest sample_body(Frames& frames, const std::string& address) {
    SampleRequest s;
    s.address = address;
    s.prompt = add_tensor(frames, std::span<const int32_t>(f_.prompt));
    s.num_samples = 1 + int32_t(rng_() % 2);
    s.sampling_params.max_tokens = 4 + int32_t(rng_() % 8);
    s.sampling_params.seed = rng_();
    return s;
  }

  std::string random_address() {
    if (f_.adapters.empty() || rng_() % 8 == 0) return "stories260K";
    return f_.adapters[rng_() % f_.adapters.size()];
  }

  void send_training(SimClient& c) {
    const std::string& session = f_.sessions[size_t(c.trainer)];
    const int phase = c.train_phase++ % 4;
    if (phase == 0 || phase == 2) {
      std::vector<Datum> data(1);
      data[0].model_input.assign(f_.prompt.begin(), f_.prompt.end() - 1);
      data[0].target_tokens.assign(f_.prompt.begin() + 1, f_.prompt.end());
      Frames frames;
      ForwardBackwardRequest req = Client::make_forward_backward(session, data, "cross_entropy", {}, frames);
      send(c, Op::forward_backward, req, std::move(frames));
    } else if (phase == 1) {
      AdamParamsMsg adam;
      adam.learning_rate = 1e-3f;
      send(c, Op::optim_step, OptimStepRequest{session, adam});
    } else {
      send(c, Op::save_weights, SaveRequest{session, "soak", "", 60});  // ephemeral
    }
  }

  void send_next(SimClient& c) {
    if (c.trainer >= 0) return send_training(c);
    uint32_t roll = uint32_t(rng_() % 1000);
    const char* kind = roll < 420 ? "sample" : roll < 570 ? "logprobs" : roll < 720 ? "catalog"
                       : roll < 850 ? "status" : roll < 870 ? "reward" : roll < 900 ? "malformed"
                       : roll < 910 ? "disconnect" : "stream";
    if (!o_.enabled(kind)) roll = 800;  // status
    Frames frames;
    if (roll < 420) {
      SampleRequest body = sample_body(frames, random_address());
      send(c, Op::sample, std::move(body), std::move(frames));
    } else if (roll < 570) {
      ComputeLogprobsRequest r{random_address(), add_tensor(frames, std::span<const int32_t>(f_.prompt))};
      send(c, Op::compute_logprobs, r, std::move(frames));
    } else if (roll < 720) {
      CatalogListRequest q;
      q.limit = 1 + uint32_t(rng_() % 50);
      send(c, Op::catalog_list, q);
    } else if (roll < 850) {
      send(c, Op::status, Empty{});
    } else if (roll < 870) {
      RewardTestRequest r;
      r.spec_json = R"({"terms": [{"name": "len", "plugin": "length", "weight": 1, "config": {"target": 8}}]})";
      r.rows = {{"Once upon a time", "", ""}};
      r.address = random_address();
      r.num_samples = 2;
      r.sampling_params.max_tokens = 6;
      r.sampling_params.seed = rng_();
      send(c, Op::reward_test, r);
    } else if (roll < 900) {
      // Malformed: a header that is not an archive. The reply is an error (bad_request).
      std::string garbage(16 + rng_() % 64, '\0');
      for (char& ch : garbage) ch = char(rng_());
      garbage[0] = 'B';
      c.socket->send(zmq::buffer(garbage), zmq::send_flags::none);
      c.in_flight = ~0ull;  // the error reply carries whatever id the decoder read (0)
      c.op = "malformed";
      c.sent_at = Clock::now();
      ++tally_.sent;
      ++tally_.malformed;
    } else if (roll < 910) {
      // Disconnect mid-request: send, then close without reading; a fresh socket replaces it.
      SampleRequest body = sample_body(frames, random_address());
      send(c, Op::sample, std::move(body), std::move(frames));
      c.socket->close();
      c.socket = connect();
      c.in_flight = 0;
      ++tally_.abandoned;
    } else {
      SampleRequest s = sample_body(frames, random_address());
      send(c, Op::sample_stream, s, std::move(frames));
    }
  }

  void receive(SimClient& c) {
    std::vector<zmq::message_t> msgs;
    if (!zmq::recv_multipart(*c.socket, std::back_inserter(msgs), zmq::recv_flags::dontwait)) return;
    std::vector<std::string> parts;
    for (auto& m : msgs) parts.push_back(m.to_string());
    Reply reply;
    try {
      reply = decode_reply(parts);
    } catch (const std::exception&) {
      tally_.codes["undecodable_reply"]++;
      return;
    }
    const bool malformed = c.op == "malformed";
    if (!malformed && reply.request_id != c.in_flight) return;  // a stale reply
    if (!is_final_reply(reply)) return;  // a stream's non-final message
    tally_.latency_ms[c.op].push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - c.sent_at).count());
    tally_.codes[reply.ok ? "ok" : reply.error.code]++;
    if (!reply.ok) tally_.examples.emplace(c.op + " " + reply.error.code, reply.error.message);
    c.in_flight = 0;
  }

  zmq::context_t& ctx_;
  const Fixture& f_;
  const SoakOptions& o_;
  std::mt19937_64 rng_;
  std::vector<SimClient> clients_;
  uint64_t next_id_ = 0;
  Tally tally_;
};

void run_soak(const SoakOptions& o) {
  const fs::path model = o.shared_dir / "models" / "stories260K" / "stories260K.bin";
  if (!fs::exists(model)) {
    std::printf("soak: skipped: fixture missing: %s\n", model.c_str());
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("spindle_soak_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::vector<std::string> args = {"--model", model.string(), "--log-level", "warn",
                                   "--max-sessions", std::to_string(std::max(o.trainers, 1)),
                                   "--max-queue", "4096", "--host-cache-mib", "64"};
  if (o.kv_blocks > 0) {
    args.push_back("--kv-blocks");
    args.push_back(std::to_string(o.kv_blocks));
  }
  if (o.catalog_cache_mib > 0) {
    args.push_back("--catalog-cache-mib");
    args.push_back(std::to_string(o.catalog_cache_mib));
  }
  SpindledProcess daemon(o.spindled, dir, args, 60);
  Fixture f;
  f.endpoint = daemon.endpoints().at(0);
  f.token = daemon.token();
  {
    ClientOptions co;
    co.endpoint = f.endpoint;
    co.token = f.token;
    Client setup(co);
    const auto tok = engine::load_tokenizer(model.parent_path() / "tok512.bin");
    f.prompt = tok->encode("Once upon a time there was");
    CreateTrainingRequest create;
    create.base_model = "stories260K";
    create.policy = "soak-adapters";
    create.rank = 4;
    create.alpha = 8;
    create.seed = 1;
    const auto s = setup.create_training(create);
    std::vector<Datum> data(1);
    data[0].model_input.assign(f.prompt.begin(), f.prompt.end() - 1);
    data[0].target_tokens.assign(f.prompt.begin() + 1, f.prompt.end());
    for (int i = 0; i < o.adapters; ++i) {
      setup.forward_backward(s.session_id, data);
      AdamParamsMsg adam;
      adam.learning_rate = 1e-2f;
      setup.optim_step(s.session_id, adam);
      f.adapters.push_back(setup.save_weights(s.session_id).address);
    }
    setup.close_training(s.session_id);
    for (int i = 0; i < std::min(o.trainers, o.clients); ++i) {
      create.policy = "soak-trainer-" + std::to_string(i);
      f.sessions.push_back(setup.create_training(create).session_id);
    }
  }

  zmq::context_t ctx(1);
  const int threads = std::max(1, std::min(o.threads, o.clients));
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < threads; ++t) {
    const int first = t * o.clients / threads, last = (t + 1) * o.clients / threads;
    workers.push_back(std::make_unique<Worker>(ctx, f, o, first, last - first, o.seed * 1000 + uint64_t(t)));
  }
  std::atomic<bool> stop{false};
  const auto start = Clock::now();
  const double baseline_at = std::min(120.0, o.seconds / 5.0);
  const auto drain_deadline = start + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(o.seconds + 30.0));
  std::vector<std::thread> running;
  for (auto& w : workers) running.emplace_back([&, w = w.get()] { w->run(stop, drain_deadline); });
  double rss_base = 0.0, rss_peak = 0.0;
  ClientOptions probe_options;
  probe_options.endpoint = f.endpoint;
  probe_options.token = f.token;
  Client probe(probe_options);  // the daemon's own figures: its host cache fills by design
  uint64_t cache_base = 0;
  double next_print = o.rss_every_s;
  while (seconds_since(start) < o.seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double r = rss_mb(daemon.pid());
    if (o.rss_every_s > 0 && seconds_since(start) >= next_print) {
      std::printf("t = %5.0f s  rss = %7.1f MB\n", seconds_since(start), r);
      next_print += o.rss_every_s;
    }
    rss_peak = std::max(rss_peak, r);
    if (rss_base == 0.0 && seconds_since(start) >= baseline_at) {
      rss_base = r;
      cache_base = probe.status().host_cache_bytes;
    }
  }
  stop = true;
  for (auto& t : running) t.join();
  const double elapsed = seconds_since(start);
  const double rss_end = rss_mb(daemon.pid());
  const auto end_status = probe.status();
  Tally all;
  for (auto& w : workers) all.merge(w->tally());
  const int rc = daemon.terminate();

  std::printf("soak: %d clients (%d training), %d adapters, %.0f s: %llu requests (%.1f/s), "
              "%llu abandoned mid-request, %llu malformed\n",
              o.clients, int(f.sessions.size()), o.adapters, elapsed,
              (unsigned long long)all.sent, double(all.sent) / elapsed,
              (unsigned long long)all.abandoned, (unsigned long long)all.malformed);
  for (const auto& [op, v] : all.latency_ms) {
    std::printf("latency %-16s n = %7zu  p50 = %8.1f ms  p99 = %8.1f ms\n", op.c_str(), v.size(),
                percentile(v, 0.50), percentile(v, 0.99));
  }
  std::string codes;
  for (const auto& [c, n] : all.codes) codes += " " + c + "=" + std::to_string(n);
  std::printf("errors_by_code:%s\n", codes.c_str());
  for (const auto& [k, m] : all.examples) std::printf("  e.g. %s: %s\n", k.c_str(), m.substr(0, 160).c_str());
  std::printf("lost_replies = %llu\n", (unsigned long long)all.lost);
  std::printf("rss_growth_mb = %.1f (%.1f %% of %.1f MB at %.0f s; peak %.1f MB)\n",
              rss_end - rss_base, rss_base > 0 ? 100.0 * (rss_end - rss_base) / rss_base : 0.0,
              rss_base, baseline_at, rss_peak);
  std::printf("host_cache_growth_mb = %.1f (of the RSS growth; its capacity %.0f MB: "
              "--host-cache-mib)\n",
              (double(end_status.host_cache_bytes) - double(cache_base)) / 1048576.0,
              double(end_status.host_cache_capacity) / 1048576.0);
  // The pools spindled reserves at start and pages in as they are first used: RSS growth up to
  // their size is the working set reaching them, not a leak.
  std::printf("reserved_pools_mb = %.1f (KV %.1f, serving slots %.1f, training slots %.1f; "
              "paged in as first used)\n",
              double(end_status.kv_bytes + end_status.serving_pool_bytes +
                     end_status.training_pool_bytes) / 1048576.0,
              double(end_status.kv_bytes) / 1048576.0,
              double(end_status.serving_pool_bytes) / 1048576.0,
              double(end_status.training_pool_bytes) / 1048576.0);
  std::printf("daemon_exit = %d\n", rc);
  fs::remove_all(dir);
}

}  // namespace

void register_soak_bench(CLI::App& app) {
  auto o = std::make_shared<SoakOptions>();
  auto shared = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "soak", "many clients, mixed ops and faults against one spindled; lost replies, RSS growth, p99");
  cmd->add_option("--seconds", o->seconds, "how long clients send (then up to 30 s of drain)")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--clients", o->clients, "concurrent clients (DEALER sockets)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--adapters", o->adapters, "revisions sampled at random")->check(CLI::Range(0, 1000));
  cmd->add_option("--trainers", o->trainers, "clients that each own a training session")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--threads", o->threads, "client threads (each polls its share of sockets)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--seed", o->seed, "op mix seed");
  cmd->add_option("--mix", o->mix, "ops in the mix, comma-separated (default: all)");
  cmd->add_option("--rss-every", o->rss_every_s, "print the daemon's RSS every S seconds");
  cmd->add_option("--kv-blocks", o->kv_blocks, "spindled --kv-blocks (default: spindled's)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--catalog-cache-mib", o->catalog_cache_mib,
                  "spindled --catalog-cache-mib (default: spindled's)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--shared", *shared, "fixtures folder (default: $SPINDLE_SHARED_DIR or ../shared)");
  cmd->add_option("--spindled", o->spindled, "spindled binary (default: beside this program's build)");
  cmd->callback([o, shared] {
    o->shared_dir = shared_dir_or_default(*shared);
    if (o->spindled.empty()) o->spindled = default_spindled();
    run_soak(*o);
  });
}

}  // namespace spindle::bench
