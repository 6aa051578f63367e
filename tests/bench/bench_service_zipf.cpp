// spindle-bench service, phase 3 (`--only zipf`): many distinct adapters through one daemon, as
// a multi-tenant server sees them (issue 13). stories260K on `--device`; `--zipf-adapters` (1000)
// distinct rank-8 revisions plus `--zipf-storm` (4000) never-requested "storm" revisions are
// registered,
// then the daemon is RESTARTED on the same data dir, so every revision starts in the blob store
// (no slot, no host-cache entry). `--zipf-clients` (256) clients, one thread and one DEALER socket
// each, `--zipf-slots` (128) serving slots, `--zipf-seconds` (10) per timed part. Prints:
//   single_tok_s          every client samples adapter 0 (warm), 16 tokens per request
//   distinct_tok_s        every request picks its adapter Zipf(s = 1) over all N (the first
//                         request of each adapter brings it up from the blob store)
//   distinct/single       the ratio (issue 13's goal: >= 0.9)
//   distinct_again/single the Zipf part once more: every adapter the first pass requested is in
//                         host memory, so the gap left is slot refills and mixed batches
//   cold_load_wait_p50_ms, cold_load_wait_p99_ms   in the Zipf part: that quantile of the
//                         latencies of each adapter's first request (the one whose cold load it
//                         waited for) minus the same quantile of the part's other requests
//   storm: half the clients ("warm") sample a warm set of adapters (16 tokens) while the other
//   half sends 1-token requests, in three timed parts:
//     warm_alone_tok_s    the warm half alone
//     warm_undisturbed_tok_s   the other half samples the warm set too (no cold loads)
//     warm_storm_tok_s    the other half requests a never-seen storm adapter every time: each
//                         request is a cold load from the blob store (blob read, decode, slot);
//                         measured over the storm's span (until the reserve runs out)
//     warm_storm/undisturbed   the warm half's tokens/s during the storm over the same load
//                         without cold loads: what cold loads cost the warm traffic (goal
//                         >= 0.9; the batch loop must not stall on a load)
//     storm_loads_per_s, storm_cold_wait_p50_ms, storm_cold_wait_p99_ms   cold loads the storm
//                         completed per second, and the quantiles of their latencies minus the
//                         same quantiles of the undisturbed part's 1-token requests
// Every part prints `lost_replies` (requests without a reply; must be 0) and `errors`.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "bench_service.h"
#include "spindle/protocol/client.h"

namespace spindle::bench {
namespace {

namespace fs = std::filesystem;
using protocol::Client;
using protocol::ClientError;
using protocol::ClientOptions;

// One completed request.
struct Done {
  int adapter = 0;
  double at_s = 0;  // completion, seconds after the part's start
  double latency_ms = 0;
  int tokens = 0;
  bool first = false;  // the first request of this adapter since the daemon started
};

// A group of clients with one request shape. `pick` returns the adapter of a client's next
// request, or -1 when that client has nothing more to send.
struct Lane {
  int clients = 0;
  int max_tokens = 16;
  std::function<int(std::mt19937_64&)> pick;
};

struct LaneResult {
  std::vector<Done> done;
  int errors = 0, lost = 0;
  // Tokens/s of the requests completed within the first `span` seconds of the part (a client
  // finishes the request it is in after the part ends; those do not count).
  double tok_s(double span) const {
    double t = 0;
    for (const Done& d : done)
      if (d.at_s <= span) t += d.tokens;
    return span > 0 ? t / span : 0.0;
  }
  std::vector<double> latencies(bool first) const {
    std::vector<double> v;
    for (const Done& d : done)
      if (d.first == first) v.push_back(d.latency_ms);
    return v;
  }
};

// What every part shares: the daemon's addresses and which adapters were requested before.
class Traffic {
 public:
  Traffic(ClientOptions options, std::vector<std::string> addresses)
      : options_(std::move(options)), addresses_(std::move(addresses)), seen_(addresses_.size()) {}

  // Runs every lane at once for `seconds` (a client finishes the request it is in); one
  // result per lane. Every client thread is joined before it returns.
  std::vector<LaneResult> run(const std::vector<Lane>& lanes, double seconds, uint64_t seed) {
    std::atomic<bool> go{false};
    std::atomic<int> ready{0};
    Clock::time_point t0;
    int total = 0;
    for (const Lane& l : lanes) total += l.clients;
    std::vector<LaneResult> per_client(static_cast<size_t>(total));
    std::vector<int> lane_of;
    std::vector<std::thread> threads;
    for (size_t li = 0; li < lanes.size(); ++li) {
      for (int c = 0; c < lanes[li].clients; ++c) {
        const size_t k = lane_of.size();
        lane_of.push_back(int(li));
        threads.emplace_back([&, k, li] {
          client_loop(lanes[li], per_client[k], std::mt19937_64(seed * 7919 + k), go, ready, t0,
                      seconds);
        });
      }
    }
    while (ready.load() < total) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    t0 = Clock::now();
    go = true;
    for (auto& t : threads) t.join();
    std::vector<LaneResult> out(lanes.size());
    for (size_t k = 0; k < per_client.size(); ++k) {
      LaneResult& to = out[size_t(lane_of[k])];
      const LaneResult& from = per_client[k];
      to.done.insert(to.done.end(), from.done.begin(), from.done.end());
      to.errors += from.errors;
      to.lost += from.lost;
    }
    return out;
  }

  // One greedy request per adapter, one at a time: they are resident afterwards.
  void warm(const std::vector<int>& adapters) {
    Client c(options_);
    protocol::SamplingParamsMsg p;
    p.max_tokens = 1;
    for (int a : adapters) {
      c.sample(addresses_[size_t(a)], kStoriesPrompt, 1, p);
      seen_[size_t(a)] = true;
    }
  }

 private:
  void client_loop(const Lane& lane, LaneResult& r, std::mt19937_64 rng, std::atomic<bool>& go,
                   std::atomic<int>& ready, const Clock::time_point& t0, double seconds) {
    std::unique_ptr<Client> client;
    try {
      client = std::make_unique<Client>(options_);
    } catch (const ClientError& e) {
      std::fprintf(stderr, "client: %s\n", e.what());
      ++r.errors;
      ++ready;
      return;
    }
    ++ready;
    while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (uint64_t j = 0; seconds_since(t0) < seconds; ++j) {
      const int a = lane.pick(rng);
      if (a < 0) return;
      protocol::SamplingParamsMsg p;
      p.max_tokens = lane.max_tokens;
      p.temperature = 1.0f;
      p.seed = rng();
      const bool first = !seen_[size_t(a)].exchange(true);
      const auto start = Clock::now();
      try {
        const auto reply = client->sample(addresses_[size_t(a)], kStoriesPrompt, 1, p);
        Done d{a, seconds_since(t0), seconds_since(start) * 1e3, 0, first};
        for (const auto& s : reply.sequences) d.tokens += int(s.tokens.size());
        r.done.push_back(d);
      } catch (const ClientError& e) {
        if (e.code() == "timeout" || e.code() == "transport")
          ++r.lost;
        else
          ++r.errors;
        if (r.errors + r.lost < 3) std::fprintf(stderr, "request failed: %s\n", e.what());
      }
    }
  }

  ClientOptions options_;
  std::vector<std::string> addresses_;
  std::vector<std::atomic<bool>> seen_;
};

void print_health(const char* part, const std::vector<LaneResult>& lanes) {
  int errors = 0, lost = 0;
  for (const LaneResult& l : lanes) errors += l.errors, lost += l.lost;
  std::printf("%s: errors = %d, lost_replies = %d\n", part, errors, lost);
}

// What cold loads add at quantile q: the q-quantile of latencies that waited for a load minus
// the q-quantile of latencies that did not, floored at 0. Under load every request's latency
// spreads with queueing; comparing the same quantile of both samples leaves the load's share.
double cold_wait_at(const std::vector<double>& cold_ms, const std::vector<double>& warm_ms,
                    double q) {
  return std::max(0.0, percentile(cold_ms, q) - percentile(warm_ms, q));
}

}  // namespace

void run_zipf_serving(const ServiceBenchOptions& opts) {
  const fs::path model = opts.shared_dir / "models" / "stories260K" / "stories260K.bin";
  if (!fs::exists(model)) {
    std::printf("zipf: skipped (no %s; set SPINDLE_SHARED_DIR)\n", model.c_str());
    return;
  }
  const int n = opts.zipf_adapters, clients = std::max(2, opts.zipf_clients);
  const int storm_n = std::max(1, opts.zipf_storm);  // the storm's never-requested reserve
  const double secs = opts.zipf_seconds;
  const fs::path dir = opts.work_dir / "zipf";
  const std::vector<std::string> args = {
      "--model",     model.string(), "--serving-slots", std::to_string(opts.zipf_slots),
      "--max-queue", "8192",         "--max-running",   "1024",
      "--kv-blocks", "16384",        "--device",        opts.device};
  std::vector<std::string> addresses;
  {
    DaemonProcess d(opts.spindled, dir, args, 120);
    Client admin(d.client_options());
    const std::string base = admin.capabilities().bases.at(0).id;
    const auto t_reg = Clock::now();
    addresses = register_adapters(d.client_options(), base, "zipf-", n + storm_n, /*threads=*/8);
    std::printf(
        "zipf serving on %s: registered %d rank-8 adapters (+%d for the storm) in %.1f s; "
        "restarting the daemon so every revision is cold\n",
        opts.device.c_str(), n, storm_n, seconds_since(t_reg));
    d.stop();
  }
  DaemonProcess d(opts.spindled, dir, args, 120);
  Traffic traffic(d.client_options(), addresses);
  std::printf("%d clients, %d serving slots, %.1f s per part\n", clients, opts.zipf_slots, secs);

  // 1. One adapter vs Zipf over N.
  traffic.warm({0});
  const auto single = traffic.run({{clients, 16, [](std::mt19937_64&) { return 0; }}}, secs, 1);
  print_health("single", single);
  const Zipf zipf(n, 1.0);
  const auto distinct =
      traffic.run({{clients, 16, [&](std::mt19937_64& g) { return zipf(g); }}}, secs, 2);
  print_health("zipf", distinct);
  const double single_tok_s = single[0].tok_s(secs), distinct_tok_s = distinct[0].tok_s(secs);
  std::printf("single_tok_s = %.1f\ndistinct_tok_s = %.1f\ndistinct/single = %.2f\n", single_tok_s,
              distinct_tok_s, distinct_tok_s / single_tok_s);
  // The same traffic again: the adapters the first pass requested are in host memory now, so
  // what is left of the gap to single is slot refills and heterogeneous batches, not loads.
  const auto again =
      traffic.run({{clients, 16, [&](std::mt19937_64& g) { return zipf(g); }}}, secs, 6);
  print_health("zipf again", again);
  std::printf("distinct_again/single = %.2f (host memory warm: %zu cold loads left)\n",
              again[0].tok_s(secs) / single_tok_s, again[0].latencies(/*first=*/true).size());
  const auto cold_ms = distinct[0].latencies(/*first=*/true);
  const auto warm_ms = distinct[0].latencies(/*first=*/false);
  std::printf("cold loads in the Zipf part: %zu (other requests: p50 %.2f ms, p99 %.2f ms)\n",
              cold_ms.size(), percentile(warm_ms, 0.5), percentile(warm_ms, 0.99));
  std::printf("cold_load_wait_p50_ms = %.2f\ncold_load_wait_p99_ms = %.2f\n",
              cold_wait_at(cold_ms, warm_ms, 0.5), cold_wait_at(cold_ms, warm_ms, 0.99));
  const auto st = Client(d.client_options()).status();
  std::printf(
      "server after the Zipf part: device hit rate %.2f, host hit rate %.2f, mean load "
      "wait %.2f ms; parks %llu cold, %llu busy (every slot in use), %llu slot evictions\n",
      st.device_hit_rate, st.host_hit_rate, st.mean_load_wait_ms,
      (unsigned long long)st.cold_parks, (unsigned long long)st.busy_parks,
      (unsigned long long)st.slot_evictions);

  // 2. A storm of cold loads beside warm traffic.
  const int warm_n = std::max(1, std::min(32, opts.zipf_slots / 4));
  std::vector<int> warm_set(static_cast<size_t>(warm_n));
  for (int i = 0; i < warm_n; ++i) warm_set[size_t(i)] = i;
  traffic.warm(warm_set);
  auto warm_pick = [warm_n](std::mt19937_64& g) { return int(g() % uint64_t(warm_n)); };
  const int half = clients / 2;
  const Lane warm{half, 16, warm_pick};
  const auto alone = traffic.run({warm}, secs, 3);
  print_health("warm alone", alone);
  const auto undisturbed = traffic.run({warm, {clients - half, 1, warm_pick}}, secs, 4);
  print_health("undisturbed", undisturbed);
  std::atomic<int> next_storm{n};
  const int storm_end = n + storm_n;
  const auto storm = traffic.run({warm,
                                  {clients - half, 1,
                                   [&](std::mt19937_64&) {
                                     const int a = next_storm++;
                                     return a < storm_end ? a : -1;
                                   }}},
                                 secs, 5);
  print_health("storm", storm);
  // The storm may run out of never-seen adapters before the part ends: compare over its span.
  double storm_span = secs;
  if (next_storm.load() >= storm_end && !storm[1].done.empty()) {
    storm_span = 0;
    for (const Done& x : storm[1].done) storm_span = std::max(storm_span, x.at_s);
  }
  const double alone_tok_s = alone[0].tok_s(secs);
  const double undisturbed_tok_s = undisturbed[0].tok_s(secs);
  const double storm_tok_s = storm[0].tok_s(storm_span);
  const auto storm_ms = storm[1].latencies(/*first=*/true);
  const auto one_token_ms = undisturbed[1].latencies(/*first=*/false);
  std::printf(
      "storm: %d warm clients on %d adapters, %d clients on cold ones (%zu cold loads in "
      "%.2f s)\n",
      half, warm_n, clients - half, storm_ms.size(), storm_span);
  std::printf("warm_alone_tok_s = %.1f\nwarm_undisturbed_tok_s = %.1f\nwarm_storm_tok_s = %.1f\n",
              alone_tok_s, undisturbed_tok_s, storm_tok_s);
  std::printf("warm_storm/undisturbed = %.2f\n", storm_tok_s / undisturbed_tok_s);
  std::printf(
      "the other half: %.1f requests/s on warm adapters (undisturbed), %.1f on cold ones "
      "(storm)\n",
      double(undisturbed[1].done.size()) / secs, double(storm[1].done.size()) / storm_span);
  std::printf(
      "storm_loads_per_s = %.1f\nstorm_cold_wait_p50_ms = %.2f\nstorm_cold_wait_p99_ms = "
      "%.2f\n",
      double(storm_ms.size()) / storm_span, cold_wait_at(storm_ms, one_token_ms, 0.5),
      cold_wait_at(storm_ms, one_token_ms, 0.99));
}

}  // namespace spindle::bench
