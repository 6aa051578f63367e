// spindle-bench service: a real spindled process on loopback IPC, driven by real clients.
//   1. Sampling throughput and latency for 1, 16 and 256 concurrent clients (one Client, one
//      DEALER socket and one thread each) against 1 vs 256 distinct adapters on stories260K;
//      every row prints `lost_replies = N` (requests that never got a reply; must be 0).
//   2. Train -> serve handoff (MinT's 18.3x measure) on a Qwen3-0.6B-shaped base: after an
//      optim_step, the time until a sampler serves the new revision through Spindle
//      (save_weights + the first sample of the new address) vs the merged-checkpoint path
//      (merge W += s·B·A into a copy of the base, write the full checkpoint durably, load it,
//      sample the same first token). `handoff_speedup = merged / spindle`.
//   3. Zipf serving over many distinct adapters with cold-load storms (bench_service_zipf.cpp).
// Bounded: fixed request counts or timed parts; stops by itself.

#include <CLI/CLI.hpp>
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "bench_service.h"
#include "spindle/adapters/peft.h"
#include "spindle/engine/generator.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/model.h"
#include "spindle/execution/select.h"
#include "spindle/protocol/client.h"

namespace spindle::bench {
namespace {

namespace fs = std::filesystem;
using protocol::Client;
using protocol::ClientError;
using protocol::ClientOptions;

// ---- 1. concurrency ------------------------------------------------------------------------

struct RowResult {
  int clients = 0, adapters = 0, requests = 0, errors = 0, lost = 0;
  double wall_s = 0, tokens = 0, p50_ms = 0, p99_ms = 0;
};

RowResult run_row(const ClientOptions& options, const std::vector<std::string>& addresses,
                  int clients, int adapters, int per_client) {
  const std::vector<int32_t>& prompt = kStoriesPrompt;
  std::vector<std::vector<double>> lat(static_cast<size_t>(clients));
  std::atomic<int> errors{0}, lost{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::unique_ptr<Client> client;
      try {
        client = std::make_unique<Client>(options);
      } catch (const ClientError& e) {
        std::fprintf(stderr, "client %d: %s\n", c, e.what());
        errors += per_client;
        ++ready;
        return;
      }
      ++ready;
      while (!go.load()) std::this_thread::yield();
      for (int j = 0; j < per_client; ++j) {
        protocol::SamplingParamsMsg p;
        p.max_tokens = 16;
        p.temperature = 1.0f;
        p.seed = uint64_t(c * 1000 + j);
        const std::string& addr = addresses[size_t((c * per_client + j) % adapters)];
        const auto t0 = Clock::now();
        try {
          const auto r = client->sample(addr, prompt, 1, p);
          lat[size_t(c)].push_back(seconds_since(t0) * 1e3);
          for (const auto& s : r.sequences) tokens += int64_t(s.tokens.size());
        } catch (const ClientError& e) {
          if (e.code() == "timeout" || e.code() == "transport") ++lost;
          else ++errors;
          if (errors + lost < 5) std::fprintf(stderr, "request failed: %s\n", e.what());
        }
      }
    });
  }
  while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  RowResult r;
  r.wall_s = seconds_since(t0);
  r.clients = clients;
  r.adapters = adapters;
  r.requests = clients * per_client;
  r.errors = errors;
  r.lost = lost;
  r.tokens = double(tokens.load());
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  r.p50_ms = percentile(all, 0.50);
  r.p99_ms = percentile(all, 0.99);
  return r;
}

void run_concurrency(const ServiceBenchOptions& opts) {
  const fs::path model = opts.shared_dir / "models" / "stories260K" / "stories260K.bin";
  if (!fs::exists(model)) {
    std::printf("concurrency: skipped (no %s; set SPINDLE_SHARED_DIR)\n", model.c_str());
    return;
  }
  const int n_adapters = opts.quick ? 16 : 256;
  DaemonProcess d(opts.spindled, opts.work_dir / "concurrency",
                  {"--model", model.string(), "--serving-slots", "64", "--max-queue", "4096",
                   "--max-running", "512", "--kv-blocks", "8192", "--device", opts.device},
                  120);
  const ClientOptions options = d.client_options();
  Client admin(options);
  const std::string base = admin.capabilities().bases.at(0).id;
  const auto t_reg = Clock::now();
  const std::vector<std::string> addresses =
      register_adapters(options, base, "bench-", n_adapters, /*threads=*/1);
  std::printf("registered %d adapters (rank 8) in %.1f s\n", n_adapters, seconds_since(t_reg));

  std::printf("%8s %8s %8s %10s %10s %9s %9s %7s\n", "clients", "adapters", "requests", "req/s",
              "tok/s", "p50_ms", "p99_ms", "errors");
  double tput[2][3] = {};
  const int clients_list[3] = {1, 16, opts.quick ? 32 : 256};
  for (int ai = 0; ai < 2; ++ai) {
    const int adapters = ai == 0 ? 1 : n_adapters;
    for (int ci = 0; ci < 3; ++ci) {
      const int clients = clients_list[ci];
      const int per_client = std::max(2, 64 / clients);
      const RowResult r = run_row(options, addresses, clients, adapters, per_client);
      tput[ai][ci] = r.tokens / r.wall_s;
      std::printf("%8d %8d %8d %10.1f %10.1f %9.2f %9.2f %7d\n", r.clients, r.adapters,
                  r.requests, double(r.requests) / r.wall_s, r.tokens / r.wall_s, r.p50_ms,
                  r.p99_ms, r.errors);
      std::printf("lost_replies = %d\n", r.lost);
    }
  }
  const auto st = admin.status();
  std::printf("server: device hit rate %.2f, host hit rate %.2f, mean load wait %.2f ms\n",
              st.device_hit_rate, st.host_hit_rate, st.mean_load_wait_ms);
  for (int ci = 0; ci < 3; ++ci) {
    std::printf("distinct/single_throughput_c%d = %.2f\n", clients_list[ci],
                tput[1][ci] / tput[0][ci]);
  }
}

// ---- 2. handoff ----------------------------------------------------------------------------

// One spindle-path handoff measurement: a daemon with --save-publish `mode`, a training
// session trained and saved handoff_repeats times, each save followed by two greedy one-token
// samples of the new revision (the second is the same request warm).
const std::vector<int32_t> kHandoffPrompt = {11, 22, 33, 44};

struct HandoffFigures {
  double spindle = 0;  // median: save_weights + the first sample
  double save = 0;     // median: save_weights alone
  double ready = 0;    // median per repetition: first sample minus warm sample plus save
  int32_t token = -1;  // the last first token
  protocol::ExportedPeft exported;  // the last revision as PEFT (export_last only)
};

HandoffFigures spindle_handoff(const ServiceBenchOptions& opts, const std::string& shape,
                               const fs::path& base_dir, const std::string& mode,
                               bool export_last) {
  DaemonProcess d(opts.spindled, opts.work_dir / ("handoff-" + shape + "-" + mode),
                  {"--model", base_dir.string(), "--base-id", "qwen3-shape", "--kv-blocks", "256",
                   "--device", opts.device, "--save-publish", mode},
                  900);
  Client client(d.client_options());
  protocol::CreateTrainingRequest req;
  req.base_model = "qwen3-shape";
  req.policy = "handoff";
  req.rank = 8;
  req.alpha = 16.0f;
  req.seed = 3;
  const auto session = client.create_training(req);

  std::vector<int32_t> seq(17);
  for (size_t i = 0; i < seq.size(); ++i) seq[i] = int32_t(100 + 37 * i);
  protocol::Datum datum;
  datum.model_input.assign(seq.begin(), seq.end() - 1);
  datum.target_tokens.assign(seq.begin() + 1, seq.end());
  const std::vector<int32_t>& prompt = kHandoffPrompt;
  protocol::SamplingParamsMsg greedy;
  greedy.max_tokens = 1;
  greedy.temperature = 0.0f;
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 1e-3f;

  HandoffFigures out;
  std::vector<double> spindle_s, save_s, ready_s;
  std::string last_address;
  for (int rep = 0; rep < opts.handoff_repeats; ++rep) {
    client.forward_backward(session.session_id, {datum});
    client.optim_step(session.session_id, adam);
    const auto t0 = Clock::now();
    const auto saved = client.save_weights(session.session_id, "handoff");
    save_s.push_back(seconds_since(t0));
    const auto sampled = client.sample(saved.address, prompt, 1, greedy);
    spindle_s.push_back(seconds_since(t0));
    const auto t1 = Clock::now();  // the same request again: the sampling cost alone
    client.sample(saved.address, prompt, 1, greedy);
    // Servable: save_weights plus what the first request paid beyond the same request warm
    // (its slot fill or load), paired within the repetition.
    ready_s.push_back(spindle_s.back() - seconds_since(t1));
    last_address = saved.address;
    out.token = sampled.sequences.at(0).tokens.at(0);
  }
  const auto st = client.status();
  out.spindle = median(spindle_s);
  out.save = median(save_s);
  out.ready = median(ready_s);
  std::printf("spindle (--save-publish %s): save_weights + first sample median %.3f s, "
              "save_weights %.3f s, servable after %.3f s (%d runs; device hit rate %.2f, host "
              "hit rate %.2f)\n",
              mode.c_str(), out.spindle, out.save, out.ready, opts.handoff_repeats,
              st.device_hit_rate, st.host_hit_rate);
  if (export_last) out.exported = client.export_peft(last_address);  // untimed
  d.stop();
  return out;
}

// W += s·B·A for every adapted module, in place (the merged-checkpoint path's merge).
void merge_in_place(engine::ModelWeights& w, const engine::LoraWeights& a) {
  auto merge = [&](Tensor& W, const engine::LoraPair& p) {
    if (p.empty()) return;
    const int64_t n = W.dim(0), k = W.dim(1), r = a.rank;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(k), int(r), a.scale(),
                p.B.data(), int(r), p.A.data(), int(k), 1.0f, W.data(), int(k));
  };
  using engine::LoraTarget;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    auto& L = w.layers[l];
    const auto& m = a.modules[l];
    merge(L.wq, m[size_t(LoraTarget::q)]);
    merge(L.wk, m[size_t(LoraTarget::k)]);
    merge(L.wv, m[size_t(LoraTarget::v)]);
    merge(L.wo, m[size_t(LoraTarget::o)]);
    merge(L.w_gate, m[size_t(LoraTarget::gate)]);
    merge(L.w_up, m[size_t(LoraTarget::up)]);
    merge(L.w_down, m[size_t(LoraTarget::down)]);
  }
}

// The first token of `prompt` (greedy) from a fresh engine of `device` over `weights`: the
// baseline's "load into a fresh engine, then the first token".
// Returns the token and the seconds the engine took to come up (the upload, on a GPU).
std::pair<int32_t, double> first_token_fresh_engine(const engine::ModelWeights& weights,
                                                    const std::string& device,
                                                    const std::vector<int32_t>& prompt) {
  const auto t0 = Clock::now();
  const auto backend = execution::open_backend(weights, {.device = device});
  const double up = seconds_since(t0);
  const auto kv = backend->make_kv_pool({.block_size = 16, .n_blocks = 16, .max_seqs = 1});
  const auto runner = backend->make_runner();
  const engine::SeqId s = kv->create();
  const engine::LogitsView l = runner->forward(std::vector<engine::BatchSequence>{{s, prompt, -1}},
                                               *kv, nullptr, engine::LogitsFor::last_token);
  return {int32_t(std::max_element(l.row(0), l.row(0) + l.vocab) - l.row(0)), up};
}

void run_handoff(const ServiceBenchOptions& opts, const std::string& shape) {
  const bool big = shape == "4b";
  const int64_t n_layers = opts.quick ? 4 : (big ? 36 : 28);
  const engine::ModelConfig config = big ? qwen3_4b_config(n_layers) : qwen3_0_6b_config(n_layers);
  engine::ModelWeights base = fast_random_weights(config, 7);
  const fs::path base_dir = opts.work_dir / ("qwen3-" + shape + "-shape");
  const auto t_write = Clock::now();
  engine::save_hf_dir(base, base_dir);
  std::printf("handoff on %s: Qwen3-%s shape, %lld layers, %.2f GB fp32 base (written in %.1f s)\n",
              opts.device.c_str(), big ? "4B" : "0.6B", (long long)n_layers,
              double(base.bytes()) / 1e9, seconds_since(t_write));

  // The spindle path, with save_weights publishing into a serving slot (the default), into
  // the host cache only, or nowhere (the first request reads the blob file): one daemon each.
  HandoffFigures slot = spindle_handoff(opts, shape, base_dir, "slot", /*export_last=*/true);
  const HandoffFigures host = spindle_handoff(opts, shape, base_dir, "host", false);
  const HandoffFigures blob = spindle_handoff(opts, shape, base_dir, "none", false);
  const double spindle = slot.spindle;
  const int32_t spindle_token = slot.token;
  const auto& exported = slot.exported;
  const fs::path peft_dir = opts.work_dir / ("handoff_peft-" + shape);
  fs::create_directories(peft_dir);
  std::ofstream(peft_dir / "adapter_config.json") << exported.adapter_config_json;
  std::ofstream(peft_dir / "adapter_model.safetensors", std::ios::binary)
      << exported.adapter_model;
  const engine::LoraWeights adapter = adapters::load_peft(peft_dir, config);

  const fs::path merged_dir = opts.work_dir / ("merged-" + shape);
  const auto t0 = Clock::now();
  merge_in_place(base, adapter);
  const double t_merge = seconds_since(t0);
  engine::save_hf_dir(base, merged_dir);  // fsyncs every file
  const double t_saved = seconds_since(t0);
  base = engine::ModelWeights{};  // the trainer's copy is gone; the server loads its own
  // Load into a fresh engine on the device (the upload is part of the load), then the first
  // token: timed together, split by a second untimed-load run below.
  const engine::ModelWeights loaded = engine::load_hf_dir(merged_dir);
  const double t_read = seconds_since(t0);
  const auto [merged_token, engine_up_s] = first_token_fresh_engine(loaded, opts.device, kHandoffPrompt);
  const double merged = seconds_since(t0);
  std::printf("merged: merge %.2f s, write %.2f s, read %.2f s, engine up %.2f s, first token "
              "%.2f s: total %.3f s\n",
              t_merge, t_saved - t_merge, t_read - t_saved, engine_up_s,
              merged - t_read - engine_up_s, merged);
  std::printf("same first token from both paths: %s\n",
              merged_token == spindle_token ? "yes" : "NO (bf16 rounding differs between a "
                                                       "merged base and base + LoRA)");
  const double t_loaded = t_read + engine_up_s;  // servable: merged, written, read, uploaded
  std::printf("handoff_speedup[%s] = %.1f\n", shape.c_str(), merged / spindle);
  // Both paths end with the same first-token computation; without it, the time until the new
  // weights are servable: save_weights (+ the first request's slot fill) vs merge+write+load.
  std::printf("handoff_ready_speedup[%s] = %.1f   (excluding the first token's compute: %.3f s vs "
              "%.3f s)\n",
              shape.c_str(), t_loaded / std::max(1e-6, slot.ready), slot.ready, t_loaded);
  std::printf("handoff_ready_speedup[%s, host cache only] = %.1f   (%.3f s)\n", shape.c_str(),
              t_loaded / std::max(1e-6, host.ready), host.ready);
  std::printf("handoff_ready_speedup[%s, through the blob file] = %.1f   (%.3f s)\n",
              shape.c_str(), t_loaded / std::max(1e-6, blob.ready), blob.ready);
  std::printf("slot_publish_speedup[%s] = %.2f   (time to servable through the blob file over "
              "published into a slot)\n",
              shape.c_str(), blob.ready / std::max(1e-6, slot.ready));
}

}  // namespace

std::vector<std::string> register_adapters(const ClientOptions& options, const std::string& base,
                                           const std::string& prefix, int n, int threads) {
  std::vector<std::string> addresses(static_cast<size_t>(n));
  std::atomic<int> next{0};
  std::vector<std::thread> workers;
  std::string error;
  std::mutex error_mutex;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      try {
        Client c(options);
        for (int i = next++; i < n; i = next++) {
          protocol::CreateTrainingRequest req;
          req.base_model = base;
          req.policy = prefix + std::to_string(i);
          req.rank = 8;
          req.alpha = 16.0f;
          req.seed = uint64_t(i + 1);
          const auto session = c.create_training(req);
          addresses[size_t(i)] = c.save_weights(session.session_id, "bench").address;
          c.close_training(session.session_id);
        }
      } catch (const std::exception& e) {
        const std::lock_guard lock(error_mutex);
        error = e.what();
        next = n;
      }
    });
  }
  for (auto& w : workers) w.join();
  if (!error.empty()) throw std::runtime_error("registering adapters: " + error);
  return addresses;
}

void register_service_bench(CLI::App& app) {
  auto opts = std::make_shared<ServiceBenchOptions>();
  auto shared = std::make_shared<std::string>();
  auto spindled = std::make_shared<std::string>();
  auto only = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "service", "spindled on loopback: concurrent sampling across adapters; train->serve "
                 "handoff; Zipf serving over many adapters with cold-load storms");
  cmd->add_option("--shared", *shared, "fixtures folder (default: $SPINDLE_SHARED_DIR or ../shared)");
  cmd->add_option("--spindled", *spindled, "spindled binary (default: beside this build's app/)");
  cmd->add_option("--only", *only, "concurrency | handoff | zipf");
  cmd->add_flag("--quick", opts->quick, "smoke run: fewer adapters/clients, 4-layer handoff base");
  cmd->add_option("--device", opts->device, "spindled --device, and the merged baseline's engine "
                  "(cpu, cuda, cuda:N)")->capture_default_str();
  cmd->add_option("--shapes", opts->shapes, "handoff bases: 0.6b, 4b (4b needs ~40 GB of host "
                  "memory for the merged baseline)")->capture_default_str();
  cmd->add_option("--handoff-repeats", opts->handoff_repeats,
                  "handoff: saves per publish mode (each figure is their median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--zipf-adapters", opts->zipf_adapters, "zipf: distinct adapters (quick: 200)")
      ->capture_default_str();
  cmd->add_option("--zipf-clients", opts->zipf_clients, "zipf: concurrent clients (quick: 64)")
      ->capture_default_str();
  cmd->add_option("--zipf-slots", opts->zipf_slots, "zipf: serving slots (quick: 32)")
      ->capture_default_str();
  cmd->add_option("--zipf-storm", opts->zipf_storm, "zipf: cold revisions the storm loads (quick: 1000)")
      ->capture_default_str();
  cmd->add_option("--zipf-seconds", opts->zipf_seconds, "zipf: seconds per timed part (quick: 3)")
      ->capture_default_str();
  cmd->callback([cmd, opts, shared, spindled, only] {
    if (opts->quick) {  // the quick sizes, unless given
      if (cmd->count("--zipf-adapters") == 0) opts->zipf_adapters = 200;
      if (cmd->count("--zipf-clients") == 0) opts->zipf_clients = 64;
      if (cmd->count("--zipf-slots") == 0) opts->zipf_slots = 32;
      if (cmd->count("--zipf-seconds") == 0) opts->zipf_seconds = 3.0;
      if (cmd->count("--zipf-storm") == 0) opts->zipf_storm = 1000;
    }
    if (!shared->empty()) opts->shared_dir = *shared;
    else if (const char* e = std::getenv("SPINDLE_SHARED_DIR"); e && *e) opts->shared_dir = e;
    else opts->shared_dir = fs::path("..") / "shared";
    const fs::path self = fs::canonical("/proc/self/exe");
    opts->spindled = spindled->empty() ? self.parent_path().parent_path().parent_path() / "app" /
                                             "spindled"
                                       : fs::path(*spindled);
    if (!fs::exists(opts->spindled)) {
      throw std::runtime_error("no spindled at " + opts->spindled.string() + " (--spindled)");
    }
    opts->work_dir = fs::temp_directory_path() / ("spindle_bench_service_" + std::to_string(::getpid()));
    fs::remove_all(opts->work_dir);
    fs::create_directories(opts->work_dir);
    struct Cleanup {
      fs::path dir;
      ~Cleanup() { std::error_code ec; fs::remove_all(dir, ec); }
    } cleanup{opts->work_dir};
    if (only->empty() || *only == "concurrency") run_concurrency(*opts);
    if (only->empty() || *only == "handoff") {
      for (const std::string& shape : opts->shapes) {
        if (shape != "0.6b" && shape != "4b") throw std::runtime_error("--shapes: 0.6b or 4b, not " + shape);
        run_handoff(*opts, shape);
      }
    }
    if (only->empty() || *only == "zipf") run_zipf_serving(*opts);
  });
}

}  // namespace spindle::bench
