// run_daemon: start-up in dependency order, the front loop on the calling thread, then an
// orderly shutdown (every thread joined before the ZeroMQ context closes).

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>

#include "cluster_ops.h"
#include "front.h"
#include "metrics.h"
#include "metrics_http.h"
#include "reward_tests.h"
#include "run_manager.h"
#include "setup.h"
#include "spindle/core/error.h"
#include "spindle/engine/loader.h"
#include "spindle/execution/select.h"
#include "spindle/protocol/curve.h"
#include "zap.h"

namespace spindle::service {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_rescan{false};  // SIGHUP: rescan the reward plugins (systemctl reload)

void on_signal(int) { request_stop(); }
void on_hangup(int) { g_rescan.store(true); }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  struct sigaction hup {};
  hup.sa_handler = on_hangup;
  sigemptyset(&hup.sa_mask);
  sigaction(SIGHUP, &hup, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// One daemon per data directory: an flock held for the process lifetime.
int lock_data_dir(const Paths& paths) {
  const fs::path lock = paths.data_dir / "spindled.lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  SPINDLE_CHECK(fd >= 0, io, "cannot open {}: {}", lock.string(), std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    SPINDLE_THROW(resource, "another spindled is serving {} (lock {} is held)",
                  paths.data_dir.string(), lock.string());
  }
  return fd;
}

// Binds `endpoint`; an ipc:// socket file gets mode 0600, or 0660 with `group` (the system
// service's --group-access).
void bind_ipc(zmq::socket_t& s, const std::string& endpoint, bool group) {
  const mode_t old = ::umask(group ? 007 : 077);
  try {
    s.bind(endpoint);
  } catch (...) {
    ::umask(old);
    throw;
  }
  ::umask(old);
  if (endpoint.starts_with("ipc://")) {
    const std::string file = endpoint.substr(6);
    const mode_t mode = group ? 0660 : 0600;
    SPINDLE_CHECK(::chmod(file.c_str(), mode) == 0, io, "chmod {:o} {}: {}", mode, file,
                  std::strerror(errno));
  }
}

int serve(Daemon& d) {
  const ServiceConfig& c = d.config;
  spdlog::logger& log = *d.log;
  const int lock_fd = lock_data_dir(d.paths);
  d.cluster = std::make_unique<ClusterState>(role_from_name(c.role));
  SPINDLE_CHECK(c.save_publish == "slot" || c.save_publish == "host" || c.save_publish == "none",
                invalid_argument, "--save-publish '{}': expected slot, host or none",
                c.save_publish);
  const bool worker = d.cluster->worker();
  SPINDLE_CHECK(!worker || !c.coordinator.empty(), invalid_argument,
                "--role worker needs --coordinator ENDPOINT (the last endpoint on the "
                "coordinator's `spindled ready:` line)");

  // The bases, their tokenizers and catalog entries; then each one's engine (below).
  const std::vector<fs::path> models = resolve_models(c, d.paths, log);
  for (size_t i = 0; i < models.size(); ++i) {
    auto b = std::make_unique<ServedBase>();
    b->model_path = models[i];
    const std::string tokenizer = i < c.tokenizers.size() ? c.tokenizers[i] : "";
    const std::string id = i < c.base_ids.size() ? c.base_ids[i] : "";
    b->id = id.empty() ? default_base_id(b->model_path) : id;
    SPINDLE_CHECK(!d.find_base(b->id) || d.bases.empty(), invalid_argument,
                  "two bases have the id '{}' ({} and {}): give one --base-id", b->id,
                  d.base(b->id).model_path.string(), b->model_path.string());
    b->weights = engine::load_model(b->model_path);
    b->backend = execution::open_backend(b->weights, {.device = c.device, .dtype = c.dtype});
    {
      const engine::MemoryReport m = b->backend->memory();
      log.info("engine on {} ({}): base '{}' ({}) resident in {}, {:.1f} MiB",
               b->backend->device().name(), m.device_name, b->id, b->model_path.string(),
               dtype_name(b->backend->dtype()), double(m.base_bytes) / double(1 << 20));
    }
    try {
      const fs::path tok = tokenizer.empty() ? engine::default_tokenizer_path(b->model_path)
                                             : fs::path(tokenizer);
      b->tokenizer = engine::load_tokenizer(tok);
      b->tokenizer_kind = b->tokenizer->kind();
    } catch (const Error& e) {
      if (!tokenizer.empty() || e.code() != ErrorCode::not_found) throw;
      log.warn("no tokenizer beside {}: completions carry no text, stop strings are refused",
               b->model_path.string());
    }
    const TokenizerConfig tc = read_tokenizer_config(b->model_path, b->tokenizer.get());
    b->chat_template = tc.chat_template;
    b->pad_token = tc.pad_token;
    b->add_bos_token = tc.add_bos_token;
    register_base(d.paths, b->id, b->model_path, b->weights.config, log);
    d.bases.push_back(std::move(b));
  }
  d.tokens = load_or_create_tokens(d.paths, log);
  if (c.group_access) {  // the local tenant's token, for the daemon's group (tokens.json stays 0600)
    std::error_code ec;
    fs::permissions(d.paths.data_dir / "token",
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read,
                    fs::perm_options::replace, ec);
  }

  SPINDLE_CHECK(!worker || d.bases.size() == 1, invalid_argument,
                "a worker serves one base; {} --model given", d.bases.size());
  if (worker && d.config.worker_name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    d.config.worker_name = fmt::format("{}/{}", host, d.bases[0]->backend->device().name());
  }

  // Residency tiers and one engine thread per base, all over one blob store. A worker's is its
  // cache of blobs fetched from the coordinator (cluster_ops.h).
  d.blobs = std::make_unique<adapters::BlobStore>(d.paths.data_dir /
                                                  (worker ? "blob-cache" : "blobs"));
  std::shared_ptr<const adapters::BlobStore> shared_blobs;
  if (worker && !c.blob_dir.empty()) {
    SPINDLE_CHECK(fs::is_directory(c.blob_dir), not_found, "--blob-dir {}: no such directory",
                  c.blob_dir);
    shared_blobs = std::make_shared<const adapters::BlobStore>(c.blob_dir);
  }
  scheduler::EngineStackOptions eo;
  eo.serving_slots = c.serving_slots;
  eo.serving_max_rank = int32_t(c.limits.max_rank);
  eo.host_cache_bytes = size_t(c.host_cache_mib) << 20;
  eo.loader_threads = c.loader_threads;
  eo.scheduler.token_budget = c.token_budget;
  eo.scheduler.max_running = c.max_running;
  eo.scheduler.training_slots = int32_t(c.max_sessions);
  eo.scheduler.training_max_rank = int32_t(c.limits.max_rank);
  eo.scheduler.kv_blocks = c.kv_blocks;
  eo.scheduler.on_fault = [log = d.log](const std::string& message) { log->error("{}", message); };
  uint64_t resident = 0;
  std::string budget_detail;
  for (auto& b : d.bases) {
    b->engine = std::make_unique<scheduler::EngineStack>(
        *b->backend, b->tokenizer.get(),
        worker ? worker_load_fn(d, b->weights.config, shared_blobs)
               : adapters::blob_store_load_fn(*d.blobs, b->weights.config),
        eo);
    b->scheduler = &b->engine->scheduler();
    b->host_cache = &b->engine->host_cache();
    b->loader = &b->engine->loader();
    const scheduler::SchedulerStats st = b->scheduler->stats();
    const uint64_t bytes = st.memory.base_bytes + st.kv_bytes + st.serving_pool_bytes +
                           st.training_pool_bytes;
    resident += bytes;
    budget_detail += fmt::format("{}'{}' {:.1f} MiB", budget_detail.empty() ? "" : ", ", b->id,
                                 double(bytes) / double(1 << 20));
  }
  if (c.memory_budget_mib > 0) {
    SPINDLE_CHECK(resident <= uint64_t(c.memory_budget_mib) << 20, resource,
                  "the bases need {:.1f} MiB resident (weights, KV caches, slot pools: {}), over "
                  "--memory-budget-mib {}; serve fewer bases or lower --kv-blocks / "
                  "--serving-slots / --max-sessions",
                  double(resident) / double(1 << 20), budget_detail, c.memory_budget_mib);
  }
  SPINDLE_CHECK(c.catalog_cache_mib >= 1, invalid_argument,
                "--catalog-cache-mib must be at least 1, got {}", c.catalog_cache_mib);
  catalog::CatalogOptions catalog_options;
  catalog_options.cache_mib = c.catalog_cache_mib;
  d.catalog.start(d.paths.data_dir, std::move(catalog_options));
  // Runs left "running" by a daemon that died are stopped now; `run_resume` continues them.
  d.runs = std::make_unique<RunManager>(d);
  d.reward_tests = std::make_unique<RewardTester>(d, c.reward_test_workers);
  d.catalog.post([&log](catalog::Catalog& cat) {
    for (const std::string& id : cat.interrupt_running_runs("spindled")) {
      log.warn("run {} was interrupted (the previous daemon stopped under it): now stopped", id);
    }
  });

  // Sockets. The ZAP handler is bound before the CURVE socket.
  d.context = std::make_unique<zmq::context_t>(1);
  d.replies = std::make_unique<ReplyChannel>(*d.context, "inproc://spindled-replies", d.log);
  zmq::socket_t pull(*d.context, zmq::socket_type::pull);
  pull.bind(d.replies->endpoint());
  const int64_t max_msg = int64_t(std::max(c.limits.max_frame_bytes, c.limits.max_header_bytes)) * 2 + (1 << 20);
  auto make_router = [&] {
    auto s = std::make_unique<zmq::socket_t>(*d.context, zmq::socket_type::router);
    s->set(zmq::sockopt::linger, 2000);
    s->set(zmq::sockopt::maxmsgsize, max_msg);
    // Sends to a vanished or saturated peer fail instead of vanishing or blocking (peer_send.h).
    s->set(zmq::sockopt::router_mandatory, true);
    return s;
  };
  std::vector<std::unique_ptr<zmq::socket_t>> routers;
  std::vector<std::string> endpoints;
  if (!worker) {  // a worker has no client endpoint: its coordinator forwards to it
    routers.push_back(make_router());
    bind_ipc(*routers.back(), d.paths.ipc, c.group_access);
    endpoints.push_back(routers.back()->get(zmq::sockopt::last_endpoint));
  }
  std::unique_ptr<ZapHandler> zap;
  const std::string cluster_endpoint =
      d.cluster->coordinator()
          ? (c.cluster_endpoint.empty() ? "ipc://" + (d.paths.data_dir / "spindled-cluster.sock").string()
                                        : c.cluster_endpoint)
          : c.coordinator;
  const bool cluster_tcp = cluster_endpoint.starts_with("tcp://");
  if (!worker && (!d.paths.tcp.empty() || cluster_tcp)) {
    zap = std::make_unique<ZapHandler>(*d.context, d.paths.authorized_clients, d.log);
  }
  if (!d.paths.tcp.empty() && !worker) {
    const auto [public_key, secret_key] = load_or_create_server_keys(d.paths);
    routers.push_back(make_router());
    auto& tcp = *routers.back();
    tcp.set(zmq::sockopt::curve_server, true);
    tcp.set(zmq::sockopt::curve_secretkey, secret_key);
    tcp.set(zmq::sockopt::zap_domain, "spindle");
    tcp.bind(d.paths.tcp);
    endpoints.push_back(tcp.get(zmq::sockopt::last_endpoint));
    log.info("TCP {} (CURVE): server public key {} (also in {}); allow-list {}", endpoints.back(),
             public_key, (d.paths.curve_dir / "server.pub").string(),
             d.paths.authorized_clients.string());
  }
  // The cluster socket: a coordinator's ROUTER that workers join, or a worker's DEALER to it.
  std::unique_ptr<zmq::socket_t> cluster;
  if (d.cluster->coordinator()) {
    cluster = make_router();
    if (cluster_tcp) {
      const auto [public_key, secret_key] = load_or_create_server_keys(d.paths);
      cluster->set(zmq::sockopt::curve_server, true);
      cluster->set(zmq::sockopt::curve_secretkey, secret_key);
      cluster->set(zmq::sockopt::zap_domain, "spindle");
      cluster->bind(cluster_endpoint);
      log.info("cluster endpoint {} (CURVE): workers need --coordinator-key {} and their "
               "curve/worker.pub in {}", cluster_endpoint, (d.paths.curve_dir / "server.pub").string(),
               d.paths.authorized_clients.string());
    } else {
      bind_ipc(*cluster, cluster_endpoint, c.group_access);
    }
  } else if (worker) {
    cluster = std::make_unique<zmq::socket_t>(*d.context, zmq::socket_type::dealer);
    cluster->set(zmq::sockopt::linger, 2000);
    cluster->set(zmq::sockopt::maxmsgsize, max_msg);
    cluster->set(zmq::sockopt::reconnect_ivl, 100);
    cluster->set(zmq::sockopt::reconnect_ivl_max, 2000);
    if (cluster_tcp) {
      SPINDLE_CHECK(!c.coordinator_key.empty(), invalid_argument,
                    "--coordinator {} is TCP: give --coordinator-key (the coordinator's "
                    "curve/server.pub, or its Z85 text)", c.coordinator);
      std::string server_key = c.coordinator_key;
      if (!protocol::is_z85_key(server_key)) {
        std::ifstream in(server_key);
        SPINDLE_CHECK(in.good(), not_found, "--coordinator-key {}: not a Z85 key and not a "
                      "readable file", server_key);
        std::getline(in, server_key);
        SPINDLE_CHECK(protocol::is_z85_key(server_key), format,
                      "--coordinator-key {}: the file does not hold a Z85 key", c.coordinator_key);
      }
      protocol::CurveKeyPair keys;
      try {
        keys = protocol::load_or_create_keypair(d.paths.curve_dir, "worker");
      } catch (const std::runtime_error& e) {
        SPINDLE_THROW(format, "CURVE worker keys: {}", e.what());
      }
      cluster->set(zmq::sockopt::curve_serverkey, server_key);
      cluster->set(zmq::sockopt::curve_publickey, keys.public_key);
      cluster->set(zmq::sockopt::curve_secretkey, keys.secret_key);
      log.info("joining {} with CURVE: this worker's public key {} ({}) must be in the "
               "coordinator's allow-list", c.coordinator, keys.public_key,
               (d.paths.curve_dir / "worker.pub").string());
    }
    cluster->connect(c.coordinator);
  }
  zmq::socket_t pub(*d.context, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 0);
  bind_ipc(pub, d.paths.pub, c.group_access);

  // The metrics endpoint, after the sockets: its URL follows theirs on the ready line.
  std::unique_ptr<MetricsServer> metrics;
  if (c.metrics_port != 0) {
    metrics = std::make_unique<MetricsServer>(c.metrics_bind, c.metrics_port,
                                              [&d] { return render_metrics(collect_metrics(d)); });
    endpoints.push_back(metrics->url());
    log.info("metrics on {}", metrics->url());
  }

  if (d.cluster->coordinator()) endpoints.push_back(cluster_endpoint);  // workers join here
  std::string ready;
  for (const auto& e : endpoints) ready += (ready.empty() ? "" : " ") + e;
  if (worker) ready = fmt::format("worker '{}' of {}", d.config.worker_name, c.coordinator);
  log.info("serving {} base(s) {} on {}; events on {}", d.bases.size(), d.served_ids(), ready,
           d.paths.pub);
  std::printf("spindled ready: %s\n", ready.c_str());
  std::fflush(stdout);

  std::vector<zmq::socket_t*> raw;
  for (auto& r : routers) raw.push_back(r.get());
  Front(d, raw, pub, pull, cluster.get(), cluster_endpoint).run(g_stop, g_rescan);

  // Everything handed off is answered (or the drain timed out): stop the metrics thread (it
  // reads the scheduler), the workers, then close sockets (routers linger to flush replies),
  // then the context.
  if (metrics) metrics->stop();
  d.runs->stop_all();  // each saves its step in progress, on the still-running scheduler
  d.reward_tests->stop();  // runs what is queued (sampling needs the scheduler and catalog)
  for (auto& b : d.bases) b->scheduler->stop(/*drain=*/false);
  d.catalog.stop();
  if (zap) zap->stop();
  close_thread_push();
  routers.clear();
  cluster.reset();
  pub.close();
  pull.close();
  zap.reset();
  for (auto& b : d.bases) b->engine.reset();
  d.context.reset();
  log.info("stopped: {} requests served, {} failed", d.replies->served.load(), d.replies->failed.load());
  ::close(lock_fd);
  return 0;
}

}  // namespace

void request_stop() { g_stop.store(true); }

int run_daemon(const ServiceConfig& config) {
  g_stop.store(false);
  install_signal_handlers();
  Daemon d;
  d.config = config;
  try {
    d.paths = resolve_paths(config);
    d.log = make_logger(d.paths, config.log_level);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindled: error: %s\n", e.what());
    return 1;
  }
  try {
    return serve(d);
  } catch (const std::exception& e) {
    d.log->critical("cannot serve: {}", e.what());
    return 1;
  }
}

}  // namespace spindle::service
