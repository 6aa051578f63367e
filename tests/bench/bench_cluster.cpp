// spindle-bench cluster: a real cluster on loopback IPC (issue 17): one coordinator and
// `--workers` (3) worker processes on stories260K, next to one standalone spindled, all started
// by this program, all serving real catalog revisions (rank 8 on q,k,v,o,gate,up,down, random
// nonzero A and B, so every adapter differs), driven by real clients (one protocol::Client and
// one thread each). Load: `--clients` (64) threads, each sending sample requests (8-token
// prompt, max_tokens 8) to policies drawn Zipf(s = 1) for `--seconds` (10) per phase. Prints:
//   cores               std::thread::hardware_concurrency() of this machine
//   cores_per_process   the CPUs each spindled may run on (its affinity mask): every process
//                       shares the same cores here, so the cluster has no more compute than the
//                       standalone daemon, only more processes
//   route_p50_us, route_p99_us     one client, warm policy, one request at a time: latency of a
//                       sample through the coordinator (coordinator -> worker -> back)
//   direct_p50_us, direct_p99_us   the same request on the standalone daemon (same base, same
//                       adapter, warm): workers have no client socket, so this is "direct"
//   route_overhead_p50_us, route_overhead_p99_us   route minus direct, per percentile
//   same_output         the greedy completion through the coordinator equals the standalone's
//   cold_p50_ms, cold_p99_ms       first request to a policy not resident on any worker (nor on
//                       the coordinator), one at a time: the worker fetches the blob from the
//                       coordinator, decodes it and fills a slot
//   cold_load_wait_p50_ms, cold_load_wait_p99_ms   per cold policy, its first request's latency
//                       minus the second (warm) request's latency to the same policy, then the
//                       percentile over the cold sample: the time a cold load adds
//   standalone_cold_load_wait_p99_ms   the same on the standalone daemon (blob on local disk)
//   standalone_rps      requests/s of the load on the standalone daemon with N/3 adapters
//   cluster_rps         requests/s of the load through the coordinator over all workers, N
//                       adapters (N/3 per worker on average)
//   cluster_scaling     cluster_rps / standalone_rps (ideal: the worker count, on that many
//                       times the cores; here every process shares cores_per_process)
//   rps_before_kill     cluster requests/s in the kill phase before one worker is SIGKILLed
//   rps_during_kill     from the kill until the coordinator marks the worker lost
//                       (--worker-timeout-s, 3 s, after its last heartbeat)
//   rps_after_kill      after it is marked lost (its policies moved: cold loads elsewhere)
//   lost_after_s        seconds from the SIGKILL until cluster_status shows the worker lost
//   errors_during_kill  `unavailable` replies in the kill phase (every attempt counts), split
//                       into those in flight on the worker when it was marked lost and those
//                       routed to it after it died (the send fails at once); a client retries
//                       an `unavailable` request after 50 ms (the protocol's rule), up to 200
//                       times
//   requests_hit_by_kill  distinct requests that saw at least one `unavailable`
//   requests_failed     requests that failed for good in any phase (goal 0)
// A warm-up of min(2 s, --seconds / 5) precedes each throughput phase, untimed. Bounded: each
// phase has a fixed duration; every child process is stopped on every path.

#include <CLI/CLI.hpp>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "spindled_process.h"
#include "spindle/adapters/base_checksum.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/catalog/catalog.h"
#include "spindle/engine/loader.h"
#include "spindle/protocol/client.h"

namespace spindle::bench {
namespace {

namespace fs = std::filesystem;
using protocol::Client;
using protocol::ClientError;
using protocol::ClientOptions;
using spindle::testing::SpindledProcess;

struct ClusterBenchOptions {
  fs::path shared_dir;
  fs::path spindled;
  int adapters = 1000;
  int clients = 64;
  int workers = 3;
  double seconds = 10.0;
  int latency_samples = 300;
  int cold_samples = 200;  // p99 of 30 was their maximum: one slow request set it (35 ms vs 6)
  double worker_timeout_s = 3.0;
  uint64_t seed = 1;
  bool keep = false;
};

constexpr const char* kTenant = "local";  // the tenant of the token spindled creates

// ---- children: stopped on every path -----------------------------------------------------

// Pids of the running children, for the SIGINT/SIGTERM handler (destructors do not run there).
std::atomic<pid_t> g_children[16];

void kill_children_and_exit(int sig) {
  for (auto& p : g_children) {
    const pid_t pid = p.load();
    if (pid > 0) ::kill(pid, SIGKILL);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

struct Child {
  Child(const fs::path& binary, const fs::path& dir, const std::vector<std::string>& args)
      : process(binary, dir, args, 120) {
    for (auto& p : g_children) {
      pid_t none = 0;
      if (p.compare_exchange_strong(none, process.pid())) {
        slot = &p;
        break;
      }
    }
  }
  ~Child() { forget(); }  // SpindledProcess's destructor SIGKILLs (and reaps) it
  void forget() {
    if (slot) slot->store(0);
    slot = nullptr;
  }
  void kill_now() {
    forget();
    process.kill_now();
  }
  int terminate() {  // SIGTERM: drain and exit (its code; -1 if it did not exit)
    const int code = process.terminate();
    forget();
    return code;
  }
  ClientOptions client_options() const {
    ClientOptions o;
    o.endpoint = process.endpoints().at(0);
    o.token = process.token();
    o.timeout_ms = 60000;
    o.client_name = "spindle-bench-cluster";
    return o;
  }
  SpindledProcess process;
  std::atomic<pid_t>* slot = nullptr;
};

int affinity_cores(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(pid, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

// ---- adapters: real revisions written with the catalog library ----------------------------

std::string policy_name(int i) { return "cl-" + std::to_string(i); }
std::string address(int i) { return std::string("spindle://") + kTenant + "/" + policy_name(i); }

// Registers the base the way spindled does (id = file stem, its checksum) and `count` policies
// cl-0.. with one revision each: LoraWeights::random(seed i + 1), the same bytes in every data
// dir, so cl-i is the same adapter on the coordinator and on the standalone daemon.
void write_catalog(const fs::path& dir, const fs::path& model, const engine::ModelConfig& config,
                   const std::string& checksum, int count) {
  catalog::Catalog cat(dir);
  catalog::BaseModel base;
  base.id = model.stem().string();
  base.arch = engine::arch_name(config.arch);
  base.path = model.string();
  base.checksum = checksum;
  cat.register_base(base, "spindle-bench");
  const engine::LoraTarget targets[] = {engine::LoraTarget::q,    engine::LoraTarget::k,
                                        engine::LoraTarget::v,    engine::LoraTarget::o,
                                        engine::LoraTarget::gate, engine::LoraTarget::up,
                                        engine::LoraTarget::down};
  std::vector<catalog::BulkEntry> entries;
  for (int i = 0; i < count; ++i) {
    const auto w = engine::LoraWeights::random(config, 8, 16.0f, targets, uint64_t(i) + 1, 0.05f,
                                               0.05f);
    catalog::BulkEntry e;
    e.spec.name = policy_name(i);
    e.spec.base_id = base.id;
    e.spec.lora = {.rank = 8,
                   .alpha = 16.0f,
                   .targets = {std::begin(targets), std::end(targets)},
                   .use_rslora = false};
    e.blob_id = cat.blobs().put(adapters::encode_revision(
        w, adapters::revision_meta_for(w, {.base_model_id = base.id, .base_checksum = checksum})));
    entries.push_back(std::move(e));
  }
  cat.bulk_register(kTenant, entries, "spindle-bench");
}

// ---- load ---------------------------------------------------------------------------------


struct LoadResult {
  std::vector<double> done_at;  // completion times (s since go) of the successful requests
  int64_t unavailable = 0;      // `unavailable` replies, every attempt, of which:
  int64_t in_flight = 0;        //   in flight on the worker when it was marked lost
  int64_t unreachable = 0;      //   routed to it after it died, before it was marked lost
  int64_t hit = 0;              // requests that saw at least one
  int64_t failed = 0;           // requests that failed for good
  double wall_s = 0;            // go -> stop
  // Successful requests completed in [from, to) per second.
  double rps(double from, double to) const {
    const auto n = std::count_if(done_at.begin(), done_at.end(),
                                 [&](double t) { return t >= from && t < to; });
    return to > from ? double(n) / (to - from) : 0.0;
  }
};

std::atomic<int> g_error_lines{0};

void note_error(const std::string& what) {
  if (g_error_lines.fetch_add(1) < 5) std::fprintf(stderr, "cluster bench: %s\n", what.c_str());
}

// `clients` threads send sample requests Zipf over `addresses` from `go` until `control`
// returns (it runs on this thread and gets the go time). Threads are joined on every path.
LoadResult run_load(const ClientOptions& options, const std::vector<std::string>& addresses,
                    int clients, uint64_t seed,
                    const std::function<void(Clock::time_point)>& control) {
  const Zipf zipf(int(addresses.size()), 1.0);
  std::atomic<bool> go{false}, stop{false};
  std::atomic<int> ready{0};
  Clock::time_point t0;
  std::vector<LoadResult> per(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  struct Joiner {
    std::vector<std::thread>& t;
    std::atomic<bool>& go;
    std::atomic<bool>& stop;
    ~Joiner() {
      stop = true;
      go = true;
      for (auto& th : t) if (th.joinable()) th.join();
    }
  } joiner{threads, go, stop};
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      LoadResult& r = per[size_t(c)];
      std::unique_ptr<Client> client;
      try {
        client = std::make_unique<Client>(options);
      } catch (const std::exception& e) {
        note_error(std::string("connect: ") + e.what());
        ++ready;
        return;
      }
      std::mt19937_64 rng(seed * 1000003 + uint64_t(c));
      ++ready;
      while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      for (uint64_t j = 0; !stop.load(); ++j) {
        protocol::SamplingParamsMsg p;
        p.max_tokens = 8;
        p.temperature = 1.0f;
        p.seed = seed + uint64_t(c) * 1000003 + j;
        const std::string& addr = addresses[size_t(zipf(rng))];
        bool saw_unavailable = false, ok = false;
        for (int attempt = 0; attempt <= 200 && !ok; ++attempt) {
          try {
            client->sample(addr, kStoriesPrompt, 1, p);
            ok = true;
          } catch (const ClientError& e) {
            if (e.code() != "unavailable") {
              note_error(addr + ": " + e.what());
              break;
            }
            ++r.unavailable;
            const std::string what = e.what();
            r.in_flight += what.find("was lost while serving") != std::string::npos;
            r.unreachable += what.find("cannot be reached") != std::string::npos;
            saw_unavailable = true;
            if (stop.load()) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }
        r.hit += saw_unavailable;
        if (ok) {
          r.done_at.push_back(seconds_since(t0));
        } else if (!stop.load()) {
          ++r.failed;
        }
      }
    });
  }
  while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  t0 = Clock::now();
  go = true;
  control(t0);
  LoadResult all;
  all.wall_s = seconds_since(t0);
  stop = true;
  for (auto& th : threads) th.join();
  for (const LoadResult& r : per) {
    all.done_at.insert(all.done_at.end(), r.done_at.begin(), r.done_at.end());
    all.unavailable += r.unavailable;
    all.in_flight += r.in_flight;
    all.unreachable += r.unreachable;
    all.hit += r.hit;
    all.failed += r.failed;
  }
  return all;
}

void sleep_until(Clock::time_point t) { std::this_thread::sleep_until(t); }
Clock::duration secs(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Warm-up, then a timed phase of `seconds`: requests/s over the timed part.
double throughput(const ClientOptions& options, const std::vector<std::string>& addresses,
                  const ClusterBenchOptions& o, uint64_t seed, int64_t& failed) {
  const double warm = std::min(2.0, o.seconds / 5);
  const LoadResult r = run_load(options, addresses, o.clients, seed, [&](Clock::time_point t0) {
    sleep_until(t0 + secs(warm + o.seconds));
  });
  failed += r.failed;
  return r.rps(warm, warm + o.seconds);
}

double timed_sample_us(Client& c, const std::string& addr, const protocol::SamplingParamsMsg& p,
                       std::vector<int32_t>* tokens = nullptr) {
  const auto t0 = Clock::now();
  const auto r = c.sample(addr, kStoriesPrompt, 1, p);
  const double us = seconds_since(t0) * 1e6;
  if (tokens) *tokens = r.sequences.at(0).tokens;
  return us;
}

// Cold, then warm, for each of `policies` (none requested before): per-policy cold latency and
// cold - warm.
struct ColdResult {
  std::vector<double> cold_ms, wait_ms;
};
ColdResult cold_loads(Client& c, const std::vector<int>& policies) {
  protocol::SamplingParamsMsg p;
  p.max_tokens = 8;
  p.temperature = 0.0f;
  ColdResult r;
  for (const int i : policies) {
    const double cold = timed_sample_us(c, address(i), p);
    const double warm = timed_sample_us(c, address(i), p);
    r.cold_ms.push_back(cold / 1e3);
    r.wait_ms.push_back((cold - warm) / 1e3);
  }
  return r;
}

// Wall time of `steps` SFT steps (forward_backward + optim_step of `batch`) on a fresh rank-8
// session trained on `ranks` workers; the last step's loss into *loss.
double sft_steps_s(Client& c, uint32_t ranks, const std::vector<protocol::Datum>& batch, int steps,
                   double* loss) {
  protocol::CreateTrainingRequest req;
  req.rank = 8;
  req.alpha = 16.0f;
  req.seed = 7;
  req.policy = "dp-bench-" + std::to_string(ranks);
  req.data_parallel = ranks;
  const std::string id = c.create_training(req).session_id;
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 1e-3f;
  c.forward_backward(id, batch);  // warm: the ranks meet at the first step
  c.optim_step(id, adam);
  const auto t0 = Clock::now();
  for (int k = 0; k < steps; ++k) {
    *loss = c.forward_backward(id, batch).metric("loss:sum");
    c.optim_step(id, adam);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  c.close_training(id);
  return s;
}

int alive_workers(Client& c) {
  int n = 0;
  for (const auto& w : c.cluster_status().workers) n += w.alive;
  return n;
}

void run_cluster_bench(const ClusterBenchOptions& o) {
  const fs::path model = o.shared_dir / "models" / "stories260K" / "stories260K.bin";
  if (!fs::exists(model)) {
    std::printf("cluster: skipped: fixture missing: %s (--shared or SPINDLE_SHARED_DIR)\n",
                model.c_str());
    return;
  }
  if (!fs::exists(o.spindled)) {
    throw std::runtime_error("no spindled at " + o.spindled.string() + " (--spindled)");
  }
  const fs::path dir =
      fs::temp_directory_path() / ("spindle_bench_cluster_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  struct Cleanup {
    fs::path dir;
    bool keep;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) fs::remove_all(dir, ec);
    }
  } cleanup{dir, o.keep};
  const auto t_start = Clock::now();

  // Adapters: N on the coordinator, N/3 (the first N/3, identical) on the standalone daemon.
  const int n_standalone = std::max(1, o.adapters / o.workers);
  {
    const engine::ModelConfig config = engine::load_model(model).config;
    const std::string checksum = adapters::base_checksum(model);
    const auto t0 = Clock::now();
    write_catalog(dir / "coord", model, config, checksum, o.adapters);
    write_catalog(dir / "standalone", model, config, checksum, n_standalone);
    std::printf("cluster: %d + %d rank-8 revisions written to two catalogs in %.1f s\n",
                o.adapters, n_standalone, seconds_since(t0));
  }

  const std::vector<std::string> common = {"--model", model.string(), "--log-level", "warn"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%g", o.worker_timeout_s);
  // Destroyed in reverse order on every path: workers, coordinator, standalone (SIGKILL).
  auto standalone = std::make_unique<Child>(o.spindled, dir / "standalone", with({}));
  auto coord = std::make_unique<Child>(
      o.spindled, dir / "coord", with({"--role", "coordinator", "--worker-timeout-s", timeout}));
  const std::string cluster_endpoint = coord->process.endpoints().back();
  std::vector<std::unique_ptr<Child>> workers;
  for (int w = 0; w < o.workers; ++w) {
    workers.push_back(std::make_unique<Child>(
        o.spindled, dir / ("w" + std::to_string(w)),
        with({"--role", "worker", "--coordinator", cluster_endpoint, "--worker-name",
              "w" + std::to_string(w), "--heartbeat-s", "0.2"})));
  }
  Client admin(coord->client_options());
  const auto t_join = Clock::now();
  while (alive_workers(admin) < o.workers) {
    if (seconds_since(t_join) > 60) throw std::runtime_error("workers did not join in 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("cluster: coordinator, %d workers and a standalone daemon up in %.1f s; %d clients, "
              "%.1f s per phase, Zipf(s = 1.0)\n",
              o.workers, seconds_since(t_start), o.clients, o.seconds);
  std::printf("cores = %u\n", std::thread::hardware_concurrency());
  std::printf("cores_per_process = %d (affinity of each spindled; all share them)\n",
              affinity_cores(coord->process.pid()));

  // 1. Routing overhead: one client each, a warm policy, alternating coordinator / standalone.
  Client direct(standalone->client_options());
  {
    protocol::SamplingParamsMsg p;
    p.max_tokens = 8;
    p.temperature = 0.0f;
    std::vector<int32_t> via, own;
    for (int i = 0; i < 5; ++i) {  // warm both
      timed_sample_us(admin, address(0), p, &via);
      timed_sample_us(direct, address(0), p, &own);
    }
    std::vector<double> route_us, direct_us;
    for (int i = 0; i < o.latency_samples; ++i) {
      route_us.push_back(timed_sample_us(admin, address(0), p));
      direct_us.push_back(timed_sample_us(direct, address(0), p));
    }
    const double r50 = percentile(route_us, 0.5), r99 = percentile(route_us, 0.99);
    const double d50 = percentile(direct_us, 0.5), d99 = percentile(direct_us, 0.99);
    std::printf("warm sample (max_tokens 8), %d each, one client:\n", o.latency_samples);
    std::printf("route_p50_us = %.0f\nroute_p99_us = %.0f\n", r50, r99);
    std::printf("direct_p50_us = %.0f\ndirect_p99_us = %.0f\n", d50, d99);
    std::printf("route_overhead_p50_us = %.0f\nroute_overhead_p99_us = %.0f\n", r50 - d50,
                r99 - d99);
    std::printf("same_output = %s\n", via == own ? "yes" : "NO");
  }

  // 1b. Data-parallel training: the same SFT steps on one worker and on all of them
  //     (data_parallel = workers; each rank a third of the batch, gradients summed by Gloo).
  {
    std::vector<protocol::Datum> batch;
    for (int i = 0; i < 48; ++i) {
      protocol::Datum d;
      for (int t = 0; t < 64; ++t) {
        d.model_input.push_back(int32_t(1 + (i * 37 + t * 11) % 500));
        d.target_tokens.push_back(int32_t(1 + (i * 37 + t * 11 + 11) % 500));
      }
      batch.push_back(std::move(d));
    }
    constexpr int kSteps = 5;
    double loss_one = 0.0, loss_dp = 0.0;
    const double one_s = sft_steps_s(admin, 1, batch, kSteps, &loss_one);
    const double dp_s = sft_steps_s(admin, uint32_t(o.workers), batch, kSteps, &loss_dp);
    std::printf("data-parallel SFT, rank 8, %zu x 64 tokens, %d steps:\n", batch.size(), kSteps);
    std::printf("one_worker_step_ms = %.1f\ndp_step_ms = %.1f (data_parallel %d)\n",
                1e3 * one_s / kSteps, 1e3 * dp_s / kSteps, o.workers);
    std::printf("dp_speedup = %.2f (ideal %d.0 on %dx the cores)\n", one_s / dp_s, o.workers,
                o.workers);
    std::printf("dp_same_loss = %s (%.6g vs %.6g)\n",
                std::abs(loss_dp - loss_one) <= 1e-4 * std::abs(loss_one) ? "yes" : "NO", loss_dp,
                loss_one);
  }

  // 2. Cold loads: policies from the Zipf tail, never requested before.
  {
    std::vector<int> cluster_cold, standalone_cold;
    const int n_cold = std::min(o.cold_samples, n_standalone - 1);
    for (int k = 0; k < n_cold; ++k) {
      cluster_cold.push_back(o.adapters - 1 - k);
      standalone_cold.push_back(n_standalone - 1 - k);
    }
    if (n_cold > 0) {
      const ColdResult c = cold_loads(admin, cluster_cold);
      const ColdResult s = cold_loads(direct, standalone_cold);
      std::printf("cold first request, %d policies one at a time (wait = cold - warm, per "
                  "policy):\n", n_cold);
      std::printf("cold_p50_ms = %.2f\ncold_p99_ms = %.2f\n", percentile(c.cold_ms, 0.5),
                  percentile(c.cold_ms, 0.99));
      std::printf("cold_load_wait_p50_ms = %.2f\ncold_load_wait_p99_ms = %.2f\n",
                  percentile(c.wait_ms, 0.5), percentile(c.wait_ms, 0.99));
      std::printf("standalone_cold_load_wait_p99_ms = %.2f\n", percentile(s.wait_ms, 0.99));
    }
  }

  // 3. Throughput: the standalone daemon with N/3 adapters, then the cluster with N.
  int64_t failed = 0;
  std::vector<std::string> all_addresses, standalone_addresses;
  for (int i = 0; i < o.adapters; ++i) all_addresses.push_back(address(i));
  for (int i = 0; i < n_standalone; ++i) standalone_addresses.push_back(address(i));
  const double standalone_rps =
      throughput(standalone->client_options(), standalone_addresses, o, o.seed, failed);
  std::printf("standalone_rps = %.1f (%d adapters)\n", standalone_rps, n_standalone);
  const auto before = admin.cluster_status();
  const double cluster_rps =
      throughput(coord->client_options(), all_addresses, o, o.seed + 1, failed);
  std::printf("cluster_rps = %.1f (%d adapters over %d workers)\n", cluster_rps, o.adapters,
              o.workers);
  std::printf("cluster_scaling = %.2f (ideal %d.0 on %dx the cores)\n",
              cluster_rps / standalone_rps, o.workers, o.workers);
  {
    const auto after = admin.cluster_status();
    std::string spread;
    for (size_t w = 0; w < after.workers.size(); ++w) {
      const uint64_t was = w < before.workers.size() ? before.workers[w].forwarded : 0;
      spread += (spread.empty() ? "" : ", ") + after.workers[w].name + " " +
                std::to_string(after.workers[w].forwarded - was) + " (" +
                std::to_string(after.workers[w].placed_policies) + " policies)";
    }
    std::printf("cluster: forwarded per worker in the phase: %s; %llu replicas for %llu "
                "policies\n",
                spread.c_str(), (unsigned long long)after.replica_placements,
                (unsigned long long)after.placed_policies);
  }

  // 4. SIGKILL one worker mid-phase.
  const double half = std::max(2.0, o.seconds / 2);
  double t_kill = 0, t_lost = -1;
  const std::string victim = "w" + std::to_string(o.workers - 1);
  const LoadResult k = run_load(
      coord->client_options(), all_addresses, o.clients, o.seed + 2, [&](Clock::time_point t0) {
        sleep_until(t0 + secs(half));
        t_kill = seconds_since(t0);
        workers.back()->kill_now();
        Client monitor(coord->client_options());
        while (seconds_since(t0) < t_kill + 10 * o.worker_timeout_s + 10) {
          bool alive = false;
          for (const auto& w : monitor.cluster_status().workers) {
            if (w.name == victim) alive = w.alive;
          }
          if (!alive) {
            t_lost = seconds_since(t0);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        sleep_until(Clock::now() + secs(half));
      });
  failed += k.failed;
  if (t_lost < 0) {
    std::printf("cluster: %s was never marked lost\n", victim.c_str());
    t_lost = k.wall_s;
  }
  std::printf("kill phase: %s SIGKILLed at %.2f s, marked lost at %.2f s, phase %.2f s\n",
              victim.c_str(), t_kill, t_lost, k.wall_s);
  {
    std::string series;
    for (int sec = 0; sec + 1 <= int(k.wall_s); ++sec) {
      series += (series.empty() ? "" : " ") + std::to_string(int(k.rps(sec, sec + 1)));
    }
    std::printf("kill phase requests/s, second by second: %s\n", series.c_str());
  }
  std::printf("rps_before_kill = %.1f\n", k.rps(0, t_kill));
  std::printf("rps_during_kill = %.1f\n", k.rps(t_kill, t_lost));
  std::printf("rps_after_kill = %.1f\n", k.rps(t_lost, k.wall_s));
  std::printf("lost_after_s = %.2f\n", t_lost - t_kill);
  std::printf("errors_during_kill = %lld (%lld in flight on it when it was marked lost, %lld "
              "routed to it after it died and refused at once, %lld other)\n",
              (long long)k.unavailable, (long long)k.in_flight, (long long)k.unreachable,
              (long long)(k.unavailable - k.in_flight - k.unreachable));
  std::printf("requests_hit_by_kill = %lld\n", (long long)k.hit);
  std::printf("requests_failed = %lld\n", (long long)failed);

  // Stop everything cleanly (SIGTERM: drain); a non-zero exit is reported, not hidden.
  std::string bad;
  for (size_t w = 0; w + 1 < workers.size(); ++w) {
    if (const int code = workers[w]->terminate(); code != 0) {
      bad += " w" + std::to_string(w) + "=" + std::to_string(code);
    }
  }
  workers.clear();
  if (const int code = coord->terminate(); code != 0) bad += " coordinator=" + std::to_string(code);
  if (const int code = standalone->terminate(); code != 0) {
    bad += " standalone=" + std::to_string(code);
  }
  std::printf("cluster: all processes stopped%s; total %.1f s\n",
              bad.empty() ? " cleanly" : (" (exit codes:" + bad + ")").c_str(),
              seconds_since(t_start));
}

}  // namespace

void register_cluster_bench(CLI::App& app) {
  auto o = std::make_shared<ClusterBenchOptions>();
  auto shared = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "cluster", "a coordinator and 3 workers on loopback vs one standalone daemon: "
                 "cluster_scaling, route overhead, cold loads, throughput through a worker kill");
  cmd->add_option("--adapters", o->adapters, "active adapters N (the standalone daemon gets N/3)")
      ->check(CLI::Range(6, 1000000))->capture_default_str();
  cmd->add_option("--clients", o->clients, "client threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--workers", o->workers, "worker processes")->check(CLI::Range(2, 14))->capture_default_str();
  cmd->add_option("--seconds", o->seconds, "timed seconds per throughput phase")
      ->check(CLI::Range(1.0, 3600.0))->capture_default_str();
  cmd->add_option("--latency-samples", o->latency_samples, "warm requests per side for the route overhead")
      ->check(CLI::Range(10, 100000))->capture_default_str();
  cmd->add_option("--cold", o->cold_samples, "cold policies sampled")->check(CLI::Range(0, 10000))->capture_default_str();
  cmd->add_option("--worker-timeout-s", o->worker_timeout_s, "the coordinator's --worker-timeout-s")
      ->check(CLI::Range(0.5, 60.0))->capture_default_str();
  cmd->add_option("--seed", o->seed, "request seed");
  cmd->add_flag("--keep", o->keep, "keep the data dirs (and the daemons' stderr files)");
  cmd->add_option("--shared", *shared, "fixtures folder (default: $SPINDLE_SHARED_DIR or ../shared)");
  cmd->add_option("--spindled", o->spindled, "spindled binary (default: beside this program's build)");
  cmd->callback([o, shared] {
    o->shared_dir = shared_dir_or_default(*shared);
    if (o->spindled.empty()) o->spindled = default_spindled();
    ::signal(SIGINT, kill_children_and_exit);
    ::signal(SIGTERM, kill_children_and_exit);
    run_cluster_bench(*o);
  });
}

}  // namespace spindle::bench
