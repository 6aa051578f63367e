// spindle-bench cluster-sim: the coordinator's real placement and routing code
// (backend/cluster/include/spindle/cluster/placement.h) driven by simulated workers in one
// process, at 1 000 workers and 10^6 active adapters by default (issue 17). Prints:
//   cold_place_us       coordinator CPU to place a policy no worker holds (rendezvous over W)
//   route_ns            coordinator CPU per routed request, Zipf-distributed over the policies,
//                       with queue depths fed back from the simulated workers (hot spill on)
//   placement_churn     fraction of placed policies that lose a replica when 1 % of the
//                       workers die (ideal: the dead workers' share, ~0.01)
//   moved_from_live     policies whose primary was a live worker but changed (goal 0)
//   rss_mb              this process's RSS with every policy placed
// Nothing here opens a socket: it measures the placement structure, not the network.

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "spindle/cluster/placement.h"

namespace spindle::bench {
namespace {

using cluster::Placement;
using cluster::WorkerId;
using cluster::WorkerLoad;

struct SimOptions {
  int workers = 1000;
  int policies = 1000000;
  int requests = 2000000;
  double zipf_s = 1.0;
  double dead_fraction = 0.01;
  uint64_t seed = 1;
};


void run_sim(const SimOptions& o) {
  Placement p;
  for (int w = 0; w < o.workers; ++w) p.add_worker("node" + std::to_string(w), "qwen3-0.6b");
  std::vector<std::string> names;
  names.reserve(size_t(o.policies));
  for (int i = 0; i < o.policies; ++i) names.push_back("tenant" + std::to_string(i % 97) +
                                                        "/policy-" + std::to_string(i));

  // Every policy placed cold, loader queues flat.
  auto t0 = Clock::now();
  for (const std::string& n : names) p.route_sample(n, "qwen3-0.6b");
  const double cold_s = seconds_since(t0);
  std::printf("cluster_sim: %d workers, %d policies placed cold in %.2f s\n", o.workers,
              o.policies, cold_s);
  std::printf("cold_place_us = %.3f\n", 1e6 * cold_s / double(o.policies));
  std::printf("rss_mb = %.1f (the placement table and the policy names)\n", vm_status_bytes("VmRSS") / 1048576.0);

  // Zipf traffic. Every `window` requests each worker's queue depth becomes its share of the
  // window scaled so an average worker sits at half the spill bound: a hot policy's home then
  // passes the bound and spills.
  const Zipf zipf(o.policies, o.zipf_s);
  std::mt19937_64 rng(o.seed);
  std::vector<int> picks(size_t(o.requests));
  for (int& k : picks) k = zipf(rng);
  std::vector<uint32_t> window_count(size_t(o.workers), 0);
  const int window = std::max(1000, o.workers * 10);
  const double avg = double(window) / double(o.workers);
  const uint64_t placed_before = p.replica_placements();
  double route_s = 0.0;
  for (int done = 0; done < o.requests;) {
    const int n = std::min(window, o.requests - done);
    t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      const WorkerId w = *p.route_sample(names[size_t(picks[size_t(done + i)])], "qwen3-0.6b");
      ++window_count[w];
    }
    route_s += seconds_since(t0);
    done += n;
    for (WorkerId w = 0; w < WorkerId(o.workers); ++w) {
      WorkerLoad l;
      l.queue_depth = uint32_t(16.0 * double(window_count[w]) / avg);
      p.update_load(w, l);
      window_count[w] = 0;
    }
  }
  const uint64_t placed_after = p.replica_placements();
  std::printf("routed %d Zipf(s = %.2f) requests: %llu hot-spill replicas added\n", o.requests,
              o.zipf_s, (unsigned long long)(placed_after - placed_before));
  std::printf("route_ns = %.0f\n", 1e9 * route_s / double(o.requests));

  // 1 % of the workers die.
  std::vector<WorkerId> primary(names.size());
  for (size_t i = 0; i < names.size(); ++i) primary[i] = p.replicas(names[i]).front();
  const int dead = std::max(1, int(std::lround(o.dead_fraction * o.workers)));
  std::vector<WorkerId> all(size_t(o.workers));
  for (int w = 0; w < o.workers; ++w) all[size_t(w)] = WorkerId(w);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<bool> is_dead(size_t(o.workers), false);
  uint64_t lost_replica = 0;
  t0 = Clock::now();
  for (int i = 0; i < dead; ++i) {
    is_dead[all[size_t(i)]] = true;
    lost_replica += p.remove_worker(all[size_t(i)]);
  }
  const double remove_s = seconds_since(t0);
  uint64_t moved_from_live = 0, replaced = 0;
  t0 = Clock::now();
  for (size_t i = 0; i < names.size(); ++i) {
    p.route_sample(names[i], "qwen3-0.6b");
    if (is_dead[primary[i]]) {
      ++replaced;
    } else if (p.replicas(names[i]).front() != primary[i]) {
      ++moved_from_live;
    }
  }
  const double reroute_s = seconds_since(t0);
  std::printf("%d of %d workers died: %llu placements lost a replica, removal %.1f ms; "
              "%llu policies re-placed, every policy re-routed in %.2f s\n",
              dead, o.workers, (unsigned long long)lost_replica, 1e3 * remove_s,
              (unsigned long long)replaced, reroute_s);
  std::printf("placement_churn = %.4f (dead share %.4f)\n",
              double(lost_replica) / double(placed_after), double(dead) / double(o.workers));
  std::printf("moved_from_live = %llu\n", (unsigned long long)moved_from_live);
}

}  // namespace

void register_cluster_sim_bench(CLI::App& app) {
  auto o = std::make_shared<SimOptions>();
  CLI::App* cmd = app.add_subcommand(
      "cluster-sim", "placement and routing at 1 000 workers and 10^6 adapters (simulated workers)");
  cmd->add_option("--workers", o->workers, "simulated workers")->check(CLI::Range(2, 100000));
  cmd->add_option("--policies", o->policies, "active adapters")->check(CLI::Range(1, 100000000));
  cmd->add_option("--requests", o->requests, "routed requests")->check(CLI::Range(1, 1000000000));
  cmd->add_option("--zipf", o->zipf_s, "Zipf exponent of the adapter choice")
      ->check(CLI::Range(0.0, 4.0));
  cmd->add_option("--dead", o->dead_fraction, "fraction of workers that die")
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--seed", o->seed, "request seed");
  cmd->callback([o] { run_sim(*o); });
}

}  // namespace spindle::bench
