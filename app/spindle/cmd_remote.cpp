// spindle status | sample: commands against a running spindled (see remote.h for how the
// endpoint and token are found).

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "commands.h"
#include "remote.h"
#include "spindle/core/error.h"

namespace spindle::cli {

namespace {

using json = nlohmann::json;

// An elapsed-time spinner on stderr while a long request runs (only on a terminal).
class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)) {
    if (!::isatty(2)) return;
    thread_ = std::thread([this] {
      const char* frames = "|/-\\";
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; !done_.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (done_.load()) break;
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\r%c %s %.1f s", frames[i % 4], what_.c_str(), s);
      }
    });
  }
  ~Progress() {
    done_ = true;
    if (thread_.joinable()) {
      thread_.join();
      std::fprintf(stderr, "\r\033[K");
    }
  }

 private:
  std::string what_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

void run_status(const RemoteOptions& o, bool as_json) {
  const auto client = connect_remote(o);
  const auto caps = client->capabilities();
  const auto st = client->status();
  if (as_json) {
    json bases = json::array();
    for (const auto& b : caps.bases) {
      json entry = {{"id", b.id}, {"arch", b.arch}, {"n_layers", b.n_layers}, {"dim", b.dim},
                    {"vocab_size", b.vocab_size}, {"max_seq_len", b.max_seq_len}};
      for (const auto& s : st.bases) {  // its engine (status class version 3)
        if (s.id != b.id) continue;
        entry["device"] = s.device;
        entry["dtype"] = s.dtype;
        entry["base_bytes"] = s.base_bytes;
        entry["kv_bytes"] = s.kv_bytes;
        entry["serving_pool_bytes"] = s.serving_pool_bytes;
        entry["training_pool_bytes"] = s.training_pool_bytes;
        entry["device_slots"] = s.device_slots;
        entry["device_slots_used"] = s.device_slots_used;
        entry["running_sequences"] = s.running_sequences;
        entry["training_sessions"] = s.training_sessions;
        entry["queue_depth"] = s.queue_depth;
      }
      bases.push_back(std::move(entry));
    }
    json placements = json::array();
    for (const auto& p : st.placements) {
      placements.push_back({{"revision", p.revision_id}, {"tier", p.tier}, {"slot", p.slot},
                            {"in_use", p.in_use}});
    }
    const auto& l = caps.limits;
    std::printf("%s\n",
                json{{"server", st.server_version},
                     {"tenant", client->server().tenant},
                     {"uptime_s", st.uptime_s},
                     {"bases", bases},
                     {"limits",
                      {{"max_batch", l.max_batch}, {"max_tokens_per_request", l.max_tokens_per_request},
                       {"max_num_samples", l.max_num_samples}, {"max_sample_tokens", l.max_sample_tokens},
                       {"max_rank", l.max_rank}, {"max_queue", l.max_queue},
                       {"max_sessions", l.max_sessions}, {"max_frame_bytes", l.max_frame_bytes}}},
                     {"queue", {{"depth", st.queue_depth}, {"parked", st.parked},
                                {"running_sequences", st.running_sequences}}},
                     {"training_sessions", st.training_sessions},
                     {"requests", {{"served", st.requests_served}, {"failed", st.requests_failed}}},
                     {"tokens_per_s", st.tokens_per_s},
                     {"device",
                      {{"device", st.device}, {"name", st.device_name}, {"dtype", st.dtype},
                       {"base_bytes", st.base_bytes}, {"kv_bytes", st.kv_bytes},
                       {"serving_pool_bytes", st.serving_pool_bytes},
                       {"training_pool_bytes", st.training_pool_bytes},
                       {"free_bytes", st.device_free_bytes}, {"total_bytes", st.device_total_bytes}}},
                     {"residency",
                      {{"device_slots", st.device_slots}, {"device_slots_used", st.device_slots_used},
                       {"host_cache_bytes", st.host_cache_bytes},
                       {"host_cache_capacity", st.host_cache_capacity},
                       {"loads_queued", st.loads_queued}, {"loads_running", st.loads_running},
                       {"device_hit_rate", st.device_hit_rate}, {"host_hit_rate", st.host_hit_rate},
                       {"mean_load_wait_ms", st.mean_load_wait_ms},
                       {"cold_parks", st.cold_parks}, {"busy_parks", st.busy_parks},
                       {"slot_evictions", st.slot_evictions}, {"placements", placements}}}}
                    .dump(2)
                    .c_str());
    return;
  }
  std::printf("%s", fmt::format("server       {} (protocol {}), up {:.0f} s, tenant {}\n",
                                st.server_version, client->server().protocol_version,
                                st.uptime_s, client->server().tenant)
                        .c_str());
  const auto mib = [](uint64_t b) { return double(b) / 1048576.0; };
  for (size_t i = 0; i < caps.bases.size(); ++i) {
    const auto& b = caps.bases[i];
    std::string engine;
    for (const auto& s : st.bases) {
      if (s.id != b.id) continue;
      engine = fmt::format("; {} {}, {:.1f} MiB resident, slots {}/{}, {} decoding, {} sessions",
                           s.device, s.dtype,
                           mib(s.base_bytes + s.kv_bytes + s.serving_pool_bytes + s.training_pool_bytes),
                           s.device_slots_used, s.device_slots, s.running_sequences,
                           s.training_sessions);
    }
    std::printf("%s", fmt::format("base         {}{} ({}, {} layers, dim {}, vocab {}, context {}){}\n",
                                  b.id, i == 0 && caps.bases.size() > 1 ? " (default)" : "", b.arch,
                                  b.n_layers, b.dim, b.vocab_size, b.max_seq_len, engine)
                          .c_str());
  }
  std::printf("%s", fmt::format("device       {} — {}, base in {}: base {:.1f} MiB, KV {:.1f} MiB, "
                                "slots {:.1f} MiB serving + {:.1f} MiB training; {:.0f} of {:.0f} "
                                "MiB free\n",
                                st.device, st.device_name, st.dtype, mib(st.base_bytes),
                                mib(st.kv_bytes), mib(st.serving_pool_bytes),
                                mib(st.training_pool_bytes), mib(st.device_free_bytes),
                                mib(st.device_total_bytes))
                        .c_str());
  std::printf("%s", fmt::format("queue        {} in flight, {} parked on cold adapters, {} "
                                "sequences decoding, {:.1f} tokens/s\n",
                                st.queue_depth, st.parked, st.running_sequences, st.tokens_per_s)
                        .c_str());
  std::printf("%s", fmt::format("requests     {} served, {} failed; {} training sessions\n",
                                st.requests_served, st.requests_failed, st.training_sessions)
                        .c_str());
  std::printf("%s", fmt::format("residency    device slots {}/{} (hit rate {:.2f}), host cache "
                                "{:.1f}/{:.1f} MiB (hit rate {:.2f}), loads {} queued {} running "
                                "(mean wait {:.1f} ms)\n",
                                st.device_slots_used, st.device_slots, st.device_hit_rate,
                                double(st.host_cache_bytes) / 1048576.0,
                                double(st.host_cache_capacity) / 1048576.0, st.host_hit_rate,
                                st.loads_queued, st.loads_running, st.mean_load_wait_ms)
                        .c_str());
  std::printf("%s", fmt::format("parks        {} cold (a load was needed), {} busy (every serving "
                                "slot in use: raise --serving-slots if this grows), {} slot "
                                "evictions, since start\n",
                                st.cold_parks, st.busy_parks, st.slot_evictions)
                        .c_str());
  for (const auto& p : st.placements) {
    std::printf("%s", fmt::format("  {:<12} {:<8} slot {:>3}  in use {}\n",
                                  p.revision_id.substr(0, 12), p.tier, p.slot, p.in_use)
                          .c_str());
  }
}

struct SampleArgs {
  std::string address, prompt;
  int32_t num_samples = 1;
  protocol::SamplingParamsMsg params;
  std::vector<std::string> stops;
};

void run_sample(const RemoteOptions& o, const SampleArgs& a, bool as_json) {
  const auto client = connect_remote(o);
  // The base's tokenizer lives on the server; a policy address needs its base id.
  const std::vector<int32_t> prompt = client->tokenize(a.prompt);
  SPINDLE_CHECK(!prompt.empty(), invalid_argument,
                "--prompt: the tokenizer gave no tokens (an empty prompt needs a BOS token)");
  protocol::SamplingParamsMsg params = a.params;
  params.stop_strings = a.stops;
  protocol::SampleResult r;
  {
    Progress p(fmt::format("sampling {} x {} tokens", a.num_samples, params.max_tokens));
    r = client->sample(a.address, prompt, a.num_samples, params);
  }
  if (as_json) {
    json seqs = json::array();
    for (const auto& s : r.sequences) {
      seqs.push_back({{"text", s.text}, {"tokens", s.tokens}, {"logprobs", s.logprobs},
                      {"stop_reason", s.stop_reason}});
    }
    std::printf("%s\n", json{{"address", a.address}, {"revision", r.revision_id},
                             {"prompt_tokens", prompt}, {"sequences", seqs}}
                            .dump(2, ' ', false, json::error_handler_t::replace)
                            .c_str());
    return;
  }
  for (size_t i = 0; i < r.sequences.size(); ++i) {
    if (r.sequences.size() > 1) std::printf("--- sample %zu (%s)\n", i, r.sequences[i].stop_reason.c_str());
    std::printf("%s\n", r.sequences[i].text.c_str());
  }
}

// `spindle cluster status`: a coordinator's workers (op cluster_status).
void run_cluster_status(const RemoteOptions& o, bool as_json) {
  const auto client = connect_remote(o);
  const protocol::ClusterStatusReply c = client->cluster_status();
  if (as_json) {
    json workers = json::array();
    for (const auto& w : c.workers) {
      workers.push_back({{"id", w.id}, {"name", w.name}, {"base", w.base}, {"device", w.device},
                         {"host", w.host}, {"pid", w.pid}, {"alive", w.alive},
                         {"last_seen_ms", w.last_seen_ms}, {"base_bytes", w.base_bytes},
                         {"device_free_bytes", w.device_free_bytes},
                         {"serving_slots", w.serving_slots}, {"slots_used", w.slots_used},
                         {"queue_depth", w.queue_depth}, {"loader_queue", w.loader_queue},
                         {"sessions", w.sessions}, {"tokens_per_s", w.tokens_per_s},
                         {"forwarded", w.forwarded}, {"placed_policies", w.placed_policies}});
    }
    json dp = json::array();
    for (const auto& s : c.data_parallel) {
      dp.push_back({{"session_id", s.session_id},
                    {"policy_address", s.policy_address},
                    {"workers", s.workers},
                    {"generation", s.generation}});
    }
    std::printf("%s\n", json{{"role", c.role},
                             {"cluster_endpoint", c.cluster_endpoint},
                             {"workers", workers},
                             {"placed_policies", c.placed_policies},
                             {"replica_placements", c.replica_placements},
                             {"data_parallel", dp}}
                            .dump(2)
                            .c_str());
    return;
  }
  std::printf("role %s%s%s\n", c.role.c_str(), c.cluster_endpoint.empty() ? "" : ", workers join ",
              c.cluster_endpoint.c_str());
  if (c.workers.empty()) return;
  std::printf("%-4s %-20s %-5s %-24s %-12s %6s %6s %9s %9s %s\n", "id", "name", "alive", "base",
              "device", "queue", "slots", "forwarded", "policies", "tokens/s");
  for (const auto& w : c.workers) {
    std::printf("%-4u %-20s %-5s %-24s %-12s %6u %3u/%-2u %9llu %9llu %.1f\n", w.id,
                w.name.c_str(), w.alive ? "yes" : "no", w.base.c_str(),
                w.device.substr(0, w.device.find(' ')).c_str(), w.queue_depth, w.slots_used,
                w.serving_slots, static_cast<unsigned long long>(w.forwarded),
                static_cast<unsigned long long>(w.placed_policies), w.tokens_per_s);
  }
  std::printf("%llu policies placed, %llu replicas\n",
              static_cast<unsigned long long>(c.placed_policies),
              static_cast<unsigned long long>(c.replica_placements));
  for (const auto& s : c.data_parallel) {
    const std::string ranks = fmt::format("{}", fmt::join(s.workers, ", "));
    std::printf("data-parallel session %s (%s): %zu ranks on workers %s%s\n", s.session_id.c_str(),
                s.policy_address.c_str(), s.workers.size(), ranks.c_str(),
                s.generation == 0 ? "" : fmt::format(" (reopened {} times)", s.generation).c_str());
  }
}

}  // namespace

void register_cluster(CLI::App& app) {
  auto o = std::make_shared<RemoteOptions>();
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cluster = app.add_subcommand("cluster", "A coordinator's workers and placements");
  cluster->require_subcommand(1);
  CLI::App* cmd = cluster->add_subcommand("status", "Workers: base, device, liveness, load, placements");
  add_remote_options(*cmd, *o);
  cmd->add_flag("--json", *as_json, "one JSON document (a `workers` array)");
  cmd->callback([o, as_json] { run_cluster_status(*o, *as_json); });
}

void register_status(CLI::App& app) {
  auto o = std::make_shared<RemoteOptions>();
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("status", "A running spindled: bases, limits, queue, residency");
  add_remote_options(*cmd, *o);
  cmd->add_flag("--json", *as_json, "one JSON document");
  cmd->callback([o, as_json] { run_status(*o, *as_json); });
}

void register_sample(CLI::App& app) {
  auto o = std::make_shared<RemoteOptions>();
  auto a = std::make_shared<SampleArgs>();
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("sample", "Sample from a policy (or the base) on a running spindled");
  cmd->add_option("ADDRESS", a->address,
                  "spindle://tenant/policy[@rev], or a base model id for the base alone")
      ->required();
  cmd->add_option("--prompt", a->prompt, "prompt text (tokenized by the server)")->required();
  cmd->add_option("-n,--num-samples", a->num_samples, "completions")->capture_default_str();
  cmd->add_option("--max-tokens", a->params.max_tokens, "tokens per completion")->capture_default_str();
  cmd->add_option("--temperature", a->params.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", a->params.top_p, "nucleus sampling (1 = off)")->capture_default_str();
  cmd->add_option("--top-k", a->params.top_k, "0 = off")->capture_default_str();
  cmd->add_option("--seed", a->params.seed, "sampling seed")->capture_default_str();
  cmd->add_option("--stop", a->stops, "stop string (repeatable)");
  cmd->add_flag("--json", *as_json, "one JSON document (tokens, logprobs, stop reasons)");
  add_remote_options(*cmd, *o);
  cmd->callback([o, a, as_json] { run_sample(*o, *a, *as_json); });
}

}  // namespace spindle::cli
