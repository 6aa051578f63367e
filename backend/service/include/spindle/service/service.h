#pragma once
// The Spindle daemon (DESIGN.md "service/"): ZeroMQ front end over the scheduler and the
// catalog. `spindled` and `spindle serve` both parse the same flags (add_service_options) and
// call run_daemon.
//
// Sockets and threads (STYLE.md 6: one thread owns each socket):
//   front thread   ROUTER on the IPC endpoint (+ ROUTER on --tcp with CURVE), PUB for events,
//                  PULL collecting replies from every other thread; decodes, authenticates,
//                  answers handshake/capabilities/status/tokenize itself, keeps the
//                  subscribe/unsubscribe event streams (src/events.h) and dispatches the rest.
//   ZAP thread     REP on inproc://zeromq.zap.01: admits CURVE clients on the allow-list.
//   metrics thread (--metrics-port only) HTTP GET /metrics, Prometheus text (src/metrics_http.h);
//                  reads thread-safe snapshots only, never engine or catalog state directly.
//   catalog thread one Catalog (SQLite connection): catalog ops, commits, address resolution.
//   engine thread  the scheduler's; its completion callbacks reply through a thread-local PUSH.
// Replies are sent only after the work they acknowledge is durable (a save replies after the
// catalog commit), so a SIGKILL loses nothing acknowledged.
//
// Tenancy: every address is resolved inside the caller's tenant (the token's). An address that
// names another tenant, or a session of another tenant, is answered `not_found` exactly like a
// missing one (the catalog's rule), and the refusal is logged.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spindle/version.h"
#include "spindle/protocol/wire.h"

namespace CLI {
class App;
}

namespace spindle::service {

inline constexpr const char* kServerVersion = "spindled " SPINDLE_VERSION;

struct ServiceConfig {
  std::string data_dir;            // "" = $SPINDLE_DATA_DIR, $XDG_DATA_HOME/spindle, ~/.local/share/spindle
  // The served bases, one per --model (none = <data_dir>/bases/arith, built by `spindle
  // make-base`); the first is the default. tokenizers[i] / base_ids[i] pair with models[i]
  // ("" or absent = the tokenizer beside the model; the config's _name_or_path, else the
  // file/directory stem).
  std::vector<std::string> models;
  std::vector<std::string> tokenizers;
  std::vector<std::string> base_ids;
  std::string device = "auto";     // auto | cpu | cuda | cuda:N (execution/select.h)
  std::string dtype = "auto";      // auto | bf16 | f32: the resident base's on the device
  std::string ipc;                 // "" = ipc://<data_dir>/spindled.sock
  std::string tcp;                 // "" = no TCP; else tcp://HOST:PORT, always CURVE
  std::string pub;                 // "" = ipc://<data_dir>/spindled-events.sock
  std::string tokens_file;         // "" = <data_dir>/tokens.json
  std::string authorized_clients;  // "" = <data_dir>/curve/authorized_clients
  std::string log_level = "info";  // trace, debug, info, warn, error, off
  // The system service: IPC sockets 0660 and the `token` file 0640, so members of the daemon's
  // group use it (tokens.json and the CURVE secret key stay 0600).
  bool group_access = false;
  std::string data_root;           // GRPO runs' built-in datasets; "" = $SPINDLE_SHARED_DIR/data
  // Prometheus text on http://<metrics_bind>:<metrics_port>/metrics (src/metrics.h): 0 = off,
  // -1 = any free port (the ready line names the one taken).
  int32_t metrics_port = 0;
  std::string metrics_bind = "127.0.0.1";

  protocol::Limits limits = default_limits();
  uint32_t max_queue = 256;        // requests in flight (all but handshake/capabilities/status)
  uint32_t max_sessions = 8;       // training sessions at once (also the training slots)
  uint32_t retry_after_ms = 50;    // suggested in `overloaded` replies
  int32_t reward_test_workers = 2; // threads serving reward_test (each with one reward host)
  // Address-space limit (RLIMIT_AS) of every reward host, reward_test's and GRPO runs', in MiB;
  // reaching it fails that call naming the term (0 = none, else >= 128).
  int64_t reward_host_memory_mib = 2048;
  // Per-tenant quotas (0 = none beyond the server-wide limits). A request over one is refused
  // with resource_exhausted naming the tenant, the quota and its flag (src/tenant_quotas.h).
  uint32_t tenant_max_sessions = 0;      // training sessions one tenant holds at once
  // Sampling tokens (prompt + num_samples x max_tokens) of one tenant's admitted, unfinished
  // sample, sample_stream, compute_logprobs and reward_test requests.
  uint64_t tenant_max_queued_tokens = 0;
  // Distinct adapters (policy revisions) one tenant's unfinished sampling requests name: each
  // holds a serving slot while it runs, so this bounds the slots one tenant can pin.
  uint32_t tenant_max_serving_slots = 0;

  int32_t serving_slots = 16;      // device slots of the serving LoRA pool
  // Where a save_weights puts its revision before replying, besides the blob store: "slot" (a
  // serving slot and the host cache: its first request is a device hit), "host" (the host
  // cache only: the first request fills a slot from host memory) or "none" (the first request
  // loads the blob file). A save_state checkpoint never takes a serving slot.
  std::string save_publish = "slot";
  int64_t host_cache_mib = 1024;   // host tier of adapter residency
  int32_t loader_threads = 2;
  int64_t token_budget = 2048;     // scheduler: tokens per engine step
  int32_t max_running = 256;       // scheduler: sequences decoding at once
  int64_t kv_blocks = 4096;        // scheduler: KV cache blocks (16 tokens each)
  double drain_timeout_s = 300.0;  // on SIGTERM: longest wait for in-flight work
  // A training session without a request naming it or a heartbeat for this long is closed.
  double session_lease_s = 60.0;
  // Refuse to start when the bases' resident weights, KV caches and slot pools need more
  // (MiB; 0 = no budget).
  int64_t memory_budget_mib = 0;
  double expiry_sweep_s = 5.0;     // how often ephemeral revisions past expiry are collected
  // How often freed heap memory goes back to the kernel (malloc_trim, src/heap_trim.h); 0 = never.
  double heap_trim_s = 30.0;
  // The catalog connection's SQLite page cache (MiB): filled as the catalog is read, so RSS
  // grows up to it as the catalog grows.
  int64_t catalog_cache_mib = 64;

  // The cluster (issue 17, docs/cluster.md). A coordinator hosts the catalog, blob store and
  // client endpoint, and routes sampling and training sessions to workers that serve the base
  // (its own engine serves a base no live worker holds, reward tests and GRPO runs); a worker
  // serves one base on one device for its coordinator and has no client endpoint.
  std::string role = "standalone";  // standalone | coordinator | worker
  std::string coordinator;          // worker: the coordinator's cluster endpoint
  std::string cluster_endpoint;     // coordinator: "" = ipc://<data_dir>/spindled-cluster.sock
  std::string coordinator_key;      // worker over TCP: server public key (Z85) or its file
  std::string worker_name;          // worker: "" = <hostname>/<device>
  std::string blob_dir;             // worker: a shared blob directory read before fetching
  double heartbeat_s = 0.5;         // worker: load report interval
  double worker_timeout_s = 3.0;    // coordinator: silence after which a worker is lost
  uint32_t spill_queue = 32;        // coordinator: Placement's hot-spill bound
  uint32_t max_replicas = 2;        // coordinator: Placement's replica bound
  // Data-parallel sessions (create_training's data_parallel; docs/cluster.md).
  double dp_timeout_s = 300.0;  // coordinator: how long a rank's gradient sum waits for the rest
  std::string collective_host;  // worker: the address its ranks' peers reach it at ("" = host name)

  static protocol::Limits default_limits() {
    protocol::Limits l;
    l.max_rank = 64;
    return l;
  }
};

// Registers every daemon flag on `app`, bound to `*config`, plus `--config FILE.json` whose keys
// are the flag names without dashes ({"data-dir": "...", "max-queue": 8}). Call
// apply_config_file(app, *config) after parsing: JSON values fill what no flag set (flags win).
void add_service_options(CLI::App& app, ServiceConfig& config);
void apply_config_file(CLI::App& app, ServiceConfig& config);

// Runs the daemon until request_stop() (or SIGTERM/SIGINT, which call it): binds, prints
// "spindled ready: <endpoints>" on stdout (the IPC ROUTER, the TCP one if any, then the metrics
// URL if any, space-separated), serves; on stop, refuses new requests with
// `unavailable`, lets in-flight work finish, sends every reply and returns 0. Setup errors
// (model, sockets, files) are logged and return 1. Installs SIGTERM/SIGINT handlers.
int run_daemon(const ServiceConfig& config);

// Async-signal-safe; makes every running daemon in this process shut down.
void request_stop();

// Call first thing in main(). When OMP_WAIT_POLICY is unset, sets it to "passive" and
// re-executes this program with the same argv (libgomp reads it once, when it loads); returns
// when the variable was already set or exec failed. Spinning OpenMP workers compete with the
// daemon's socket, catalog and loader threads for cores between engine steps: measured 9x less
// sampling throughput with 16 clients on 2 cores.
void reexec_with_passive_openmp(char** argv);

}  // namespace spindle::service
