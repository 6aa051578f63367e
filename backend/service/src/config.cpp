// Daemon flags and the --config JSON file that mirrors them (one table: for_each_field).

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <string>

#include "spindle/core/error.h"
#include "spindle/service/service.h"

namespace spindle::service {
namespace {

// Calls f(name, help, field&) for every configurable field. `name` is the flag without "--"
// and the JSON key.
template <class F>
void for_each_field(ServiceConfig& c, F&& f) {
  f("data-dir", "data directory (default: $SPINDLE_DATA_DIR, $XDG_DATA_HOME/spindle or "
                "~/.local/share/spindle)", c.data_dir);
  f("model", "a base model: HF directory or llama2.c .bin; repeat to serve several, the first "
             "is the default (default: <data-dir>/bases/arith, built by `spindle make-base` "
             "when missing)", c.models);
  f("tokenizer", "tokenizer file of the base given at the same position (default: found beside "
                 "the model)", c.tokenizers);
  f("base-id", "catalog id of the base given at the same position, e.g. Qwen/Qwen3-0.6B "
               "(default: its config.json _name_or_path, else the file or directory stem)",
    c.base_ids);
  f("device", "where the engine runs: auto (the first GPU when one exists, else the CPU), cpu, "
              "cuda or cuda:N", c.device);
  f("dtype", "the resident base's element type on the device: auto (bf16 on a GPU, f32 on the "
             "CPU), bf16 or f32", c.dtype);
  f("ipc", "local endpoint (default: ipc://<data-dir>/spindled.sock)", c.ipc);
  f("tcp", "also listen on tcp://HOST:PORT (CURVE encrypted, allow-listed clients only)", c.tcp);
  f("pub", "event endpoint (default: ipc://<data-dir>/spindled-events.sock)", c.pub);
  f("tokens", "tokens file, JSON [{\"token\": ..., \"tenant\": ...}] (default: "
              "<data-dir>/tokens.json, created with one token for tenant 'local')",
    c.tokens_file);
  f("authorized-clients", "CURVE public keys (Z85, one per line) allowed on --tcp (default: "
                          "<data-dir>/curve/authorized_clients)", c.authorized_clients);
  f("log-level", "trace, debug, info, warn, error or off", c.log_level);
  f("group-access", "IPC sockets 0660 and the token file 0640: members of the daemon's group may "
                    "use it (the system service)", c.group_access);
  f("data-root", "built-in datasets of GRPO runs (default: $SPINDLE_SHARED_DIR/data when set, "
                 "else none: runs may use only inline and absolute jsonl datasets)", c.data_root);
  f("metrics-port", "serve Prometheus metrics on http://<metrics-bind>:PORT/metrics (0: off, "
                    "-1: any free port, named in the ready line)", c.metrics_port);
  f("metrics-bind", "address of the metrics endpoint (default: localhost only)", c.metrics_bind);
  f("max-queue", "requests in flight before `overloaded`", c.max_queue);
  f("max-sessions", "training sessions at once", c.max_sessions);
  f("retry-after-ms", "retry delay suggested in `overloaded` replies", c.retry_after_ms);
  f("max-frame-bytes", "largest frame of a request", c.limits.max_frame_bytes);
  f("max-frames", "most tensor frames in a request", c.limits.max_frames);
  f("max-batch", "most data per forward/forward_backward", c.limits.max_batch);
  f("max-tokens-per-request", "most tensor elements in one request",
    c.limits.max_tokens_per_request);
  f("max-num-samples", "most samples per sample request", c.limits.max_num_samples);
  f("max-sample-tokens", "largest sampling max_tokens", c.limits.max_sample_tokens);
  f("max-rank", "largest LoRA rank (training and serving pools)", c.limits.max_rank);
  f("max-string-bytes", "longest string field", c.limits.max_string_bytes);
  f("max-reward-test-samples", "most completions (rows x num_samples) of one reward_test",
    c.limits.max_reward_test_samples);
  f("reward-test-workers", "threads serving reward_test, each with its own reward host",
    c.reward_test_workers);
  f("reward-host-memory-mib", "address-space limit of each reward host (MiB): a plugin that "
                              "reaches it fails that call (0: none, else at least 128)",
    c.reward_host_memory_mib);
  f("tenant-max-sessions", "training sessions one tenant may hold at once (0: only "
                           "--max-sessions)", c.tenant_max_sessions);
  f("tenant-max-queued-tokens", "sampling tokens (prompt + num_samples x max_tokens) of one "
                                "tenant's unfinished sampling requests (0: no quota)",
    c.tenant_max_queued_tokens);
  f("tenant-max-serving-slots", "distinct adapters one tenant's unfinished sampling requests may "
                                "use, each holding a serving slot (0: no quota)",
    c.tenant_max_serving_slots);
  f("serving-slots", "adapter slots of the serving pool", c.serving_slots);
  f("save-publish", "where save_weights puts its revision before replying: slot (a serving slot "
                    "and the host cache: the first request is a device hit), host (the host "
                    "cache only) or none (the first request reads the blob file)",
    c.save_publish);
  f("host-cache-mib", "host cache of decoded adapters (MiB)", c.host_cache_mib);
  f("loader-threads", "cold-load threads", c.loader_threads);
  f("token-budget", "tokens per engine step (prefill + decode)", c.token_budget);
  f("max-running", "sequences decoding at once", c.max_running);
  f("kv-blocks", "KV cache blocks of 16 tokens", c.kv_blocks);
  f("drain-timeout-s", "on SIGTERM, the longest wait for in-flight work", c.drain_timeout_s);
  f("session-lease-s", "close a training session after this long without a request or heartbeat "
                       "naming it (its saved revisions stay)", c.session_lease_s);
  f("memory-budget-mib", "refuse to start when the bases' weights, KV caches and slot pools "
                         "need more (0: no budget)", c.memory_budget_mib);
  f("expiry-sweep-s", "how often ephemeral revisions past their expiry are collected",
    c.expiry_sweep_s);
  f("heap-trim-s", "how often freed heap memory is returned to the kernel (malloc_trim; 0: "
                   "never)", c.heap_trim_s);
  f("catalog-cache-mib", "SQLite page cache of the catalog connection (MiB; RSS grows up to it "
                         "as the catalog grows)", c.catalog_cache_mib);
  f("role", "standalone (all in one process), coordinator (catalog, blob store, client endpoint; "
            "routes engine work to workers) or worker (one base on one device, joins "
            "--coordinator)", c.role);
  f("coordinator", "worker: the coordinator's cluster endpoint (the last endpoint on its "
                   "`spindled ready:` line)", c.coordinator);
  f("cluster-endpoint", "coordinator: where workers join (default: "
                        "ipc://<data-dir>/spindled-cluster.sock; tcp://HOST:PORT is CURVE "
                        "encrypted, workers allow-listed in --authorized-clients)",
    c.cluster_endpoint);
  f("coordinator-key", "worker over TCP: the coordinator's CURVE public key, Z85 text or a file "
                       "holding it (its <data-dir>/curve/server.pub)", c.coordinator_key);
  f("worker-name", "worker: its stable name for placement (default: <hostname>/<device>)",
    c.worker_name);
  f("blob-dir", "worker: read revision blobs from this shared directory (the coordinator's "
                "<data-dir>/blobs) before asking the coordinator for them", c.blob_dir);
  f("heartbeat-s", "worker: how often it reports its load to the coordinator", c.heartbeat_s);
  f("worker-timeout-s", "coordinator: a worker silent this long is lost (its requests in flight "
                        "fail `unavailable`, its policies move)", c.worker_timeout_s);
  f("spill-queue", "coordinator: a hot policy gains a replica on another worker when its "
                   "replicas' shortest queue is longer than this", c.spill_queue);
  f("max-replicas", "coordinator: most workers one policy is served from at once",
    c.max_replicas);
  f("dp-timeout-s",
    "coordinator: how long a data-parallel rank's gradient sum waits for the "
    "other ranks before its optim_step fails",
    c.dp_timeout_s);
  f("collective-host",
    "worker: the host name or address other workers reach it at for "
    "data-parallel gradient sums (Gloo over TCP; default: its host name)",
    c.collective_host);
}

}  // namespace

void add_service_options(CLI::App& app, ServiceConfig& config) {
  app.add_option("--config", "JSON file whose keys mirror these flags (flags win)")
      ->check(CLI::ExistingFile);
  for_each_field(config, [&](const char* name, const char* help, auto& field) {
    app.add_option(std::string("--") + name, field, help)->capture_default_str();
  });
}

void apply_config_file(CLI::App& app, ServiceConfig& config) {
  const CLI::Option* opt = app.get_option("--config");
  if (opt->count() == 0) return;
  const std::string path = opt->as<std::string>();
  std::ifstream in(path);
  SPINDLE_CHECK(in.good(), not_found, "--config {}: cannot open", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    SPINDLE_THROW(format, "--config {}: not JSON: {}", path, e.what());
  }
  SPINDLE_CHECK(j.is_object(), format, "--config {}: expected a JSON object", path);
  std::set<std::string> known;
  for_each_field(config, [&](const char* name, const char*, auto& field) {
    known.insert(name);
    if (!j.contains(name) || app.get_option(std::string("--") + name)->count() > 0) return;
    try {
      using T = std::decay_t<decltype(field)>;
      if constexpr (std::is_same_v<T, std::vector<std::string>>) {
        // A list, or one string for the single-base case ("model": "/srv/qwen3").
        field = j.at(name).is_string() ? T{j.at(name).get<std::string>()} : j.at(name).get<T>();
      } else {
        field = j.at(name).get<T>();
      }
    } catch (const nlohmann::json::exception& e) {
      SPINDLE_THROW(format, "--config {}: key '{}': {}", path, name, e.what());
    }
  });
  for (const auto& [key, value] : j.items()) {
    SPINDLE_CHECK(known.count(key) != 0, invalid_argument,
                  "--config {}: unknown key '{}' (keys are the flag names without dashes)", path,
                  key);
  }
}

}  // namespace spindle::service
