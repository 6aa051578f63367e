#pragma once
// What every thread of the daemon shares. Built by run_daemon before any thread starts and
// destroyed after every thread is joined. Fields are immutable after start-up unless marked
// with the lock that guards them.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include <spdlog/logger.h>

#include "cluster_state.h"
#include "reply_channel.h"
#include "tenant_quotas.h"
#include "spindle/adapters/blob_store.h"
#include "spindle/adapters/host_cache.h"
#include "spindle/adapters/loader.h"
#include "spindle/adapters/residency.h"
#include "spindle/catalog/catalog.h"
#include "spindle/engine/backend.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/engine/weights.h"
#include "spindle/scheduler/engine_stack.h"
#include "spindle/service/service.h"

namespace spindle::service {

struct Paths {
  std::filesystem::path data_dir;
  std::string ipc, tcp, pub;  // endpoints ("" tcp = none)
  std::filesystem::path tokens_file, authorized_clients, curve_dir, log_file;
};

// One served base: its weights resident on the engine's device, its tokenizer, and its own
// residency tiers, KV and slot pools and scheduler (one engine thread per base). Built before
// any thread starts; immutable afterwards (the pointed-to engine is thread-safe).
struct ServedBase {
  std::string id;  // catalog id, may contain '/' ("Qwen/Qwen3-0.6B")
  std::filesystem::path model_path;
  engine::ModelWeights weights;
  std::unique_ptr<engine::ExecutionBackend> backend;  // the engine on --device
  std::unique_ptr<engine::Tokenizer> tokenizer;       // null: none beside the model
  std::string tokenizer_kind;  // "llama2c" | "bpe" ("" without a tokenizer)
  // From the model directory's tokenizer_config.json, when it has one.
  std::string chat_template;  // "" = none
  std::optional<int32_t> pad_token;
  bool add_bos_token = false;
  std::unique_ptr<scheduler::EngineStack> engine;
  // Views into `engine` (valid while it lives), named for the call sites.
  scheduler::Scheduler* scheduler = nullptr;
  adapters::HostCache* host_cache = nullptr;
  adapters::Loader* loader = nullptr;
};

// A training session: the scheduler's session plus what the service needs to commit it.
struct Session {
  std::string id;  // on the wire
  std::string tenant;
  std::string policy;
  ServedBase* base = nullptr;  // the policy's base (lives as long as the daemon)
  scheduler::SessionId sid = 0;
  int64_t rank = 0;
  float alpha = 0.0f;
  // A coordinator's session on a worker (cluster_state.h; kLocalWorker = on this process), and
  // what it is restored from when that worker is lost: the last save_state revision, else the
  // revision it started from, else a fresh init of (targets, seed).
  uint32_t worker = kLocalWorker;
  std::string restore_revision{};  // "" = fresh
  bool restore_optimizer = false;
  std::vector<engine::LoraTarget> targets{};
  uint64_t seed = 0;
  std::string user_metadata{};
  uint32_t lease_ms = 0;  // a worker's session: the coordinator's lease it reports (0 = ours)
  // A coordinator's data-parallel session (training_dp.cpp): rank r trains on worker ranks[r]
  // (ranks[0] == worker; empty = one worker), in the group "<id>.<generation>" (a new
  // generation each time a lost worker makes the coordinator reopen every rank).
  std::vector<uint32_t> ranks{};
  uint32_t generation = 0;
};

// Live sessions with their leases and their request gates. Thread-safe: one mutex, held only
// for map updates (never while a deferred task runs).
//
// Lease: a session not named by a request (find) and not listed by a heartbeat (renew) for
// `lease` is returned once by take_expired, which removes it.
//
// Gate: while a session is blocked (load_state reading its revision on the catalog thread), the
// session's later requests are deferred instead of submitted, and run in arrival order by
// unblock(), so a pipelined request never overtakes the load_state sent before it.
//
// Per-tenant count (--tenant-max-sessions): a create reserves its tenant's place when it is
// admitted (on the catalog thread, which runs every create in order), before the scheduler
// opens the session on the engine thread; add() turns the reservation into the session, and
// unreserve() gives back the place of a create that failed. So pipelined creates cannot
// overshoot a quota.
class SessionTable {
 public:
  using Clock = std::chrono::steady_clock;
  using Task = std::function<void()>;

  // Stores `s` with a fresh lease under s.id, or a fresh random id when s.id is "" (new_id());
  // takes one reservation of s.tenant when it has one.
  std::string add(Session s);
  static std::string new_id();  // "s-" + 12 random hex digits
  // A coordinator's remote session: its worker now, and its restore point after a save_state.
  void set_worker(const std::string& id, uint32_t worker);
  void set_restore(const std::string& id, const std::string& revision, bool optimizer);
  // A data-parallel session reopened: its ranks' workers and the group's generation.
  void set_ranks(const std::string& id, std::vector<uint32_t> ranks, uint32_t generation);
  void reserve(const std::string& tenant);
  void unreserve(const std::string& tenant);
  // `tenant`'s live sessions plus its reservations.
  size_t held_by(const std::string& tenant) const;
  // The session when it exists and belongs to `tenant`; renews its lease.
  std::optional<Session> find(const std::string& tenant, const std::string& id);
  // Renews the leases of `ids` (tenant's); returns the ids that are not live sessions of it.
  std::vector<std::string> renew(const std::string& tenant, const std::vector<std::string>& ids);
  // Removes and returns the sessions whose lease ran out before `now`.
  std::vector<Session> take_expired(Clock::time_point now, Clock::duration lease);
  void erase(const std::string& id);
  // `tenant`'s live sessions (copies), by id; leases untouched.
  std::vector<Session> of_tenant(const std::string& tenant) const;
  size_t size() const;
  size_t size_on(const ServedBase* base) const;

  // Runs `task` now unless the session is blocked, else queues it (false: no such session,
  // task dropped).
  bool run_or_defer(const std::string& id, Task task);
  void block(const std::string& id);
  // Unblocks, then runs the queued tasks in order until one blocks the session again.
  void unblock(const std::string& id);

 private:
  struct Entry {
    Session session;
    Clock::time_point renewed;
    bool blocked = false;
    bool draining = false;  // unblock() is running the deferred tasks
    std::deque<Task> deferred;
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> sessions_;
  std::unordered_map<std::string, size_t> reserved_;  // tenant -> creates admitted, not yet added
};

// What an address resolved to, for sampling: the base, revision id and its blob (the
// residency key; "" with revision "" = the bare base).
struct ResolvedAdapter {
  ServedBase* base = nullptr;
  std::string revision_id;
  std::string blob;
};

// Resolutions of immutable addresses (a full 64-hex revision id) by (tenant, policy, revision).
// @latest is never cached. A deleted policy's entries are dropped. Thread-safe.
class ResolutionCache {
 public:
  // The key of spindle://tenant/policy@revision.
  static std::string key(const std::string& tenant, const std::string& policy,
                         const std::string& revision_id) {
    return tenant + "/" + policy + "@" + revision_id;
  }
  std::optional<ResolvedAdapter> find(const std::string& key) const;
  void put(const std::string& key, ResolvedAdapter value);
  // How a sampling request's address resolved (spindle_address_resolutions_total{via}): its
  // entry found here, or through the catalog. Counted by the one resolving call site.
  void note_hit() { hits_.fetch_add(1, std::memory_order_relaxed); }
  void note_catalog_lookup() { catalog_lookups_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t catalog_lookups() const { return catalog_lookups_.load(std::memory_order_relaxed); }
  void drop_policy(const std::string& tenant, const std::string& policy);
  void drop_revision(const std::string& tenant, const std::string& policy,
                     const std::string& revision_id);

 private:
  mutable std::mutex mutex_;
  std::map<std::string, ResolvedAdapter> entries_;  // key "tenant/policy@rev"
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> catalog_lookups_{0};
};

// Which tenants have sampled from which residency key (blob id), so the residency events of a
// `subscribe` show a tenant only placements of its own revisions. Filled wherever an address
// resolves to a blob for a tenant (sample, sample_stream, compute_logprobs, reward_test).
// Content addressing lets two tenants share a blob: it is then shown to both (each did sample
// it). Bounded: past 100000 keys it forgets everything (events then omit those placements until
// their tenants sample again). Thread-safe.
class AdapterOwners {
 public:
  void note(const std::string& blob, const std::string& tenant);
  bool owns(const std::string& tenant, const std::string& blob) const;
  // `status` with only `tenant`'s placements (the counters stay the server's): what the `status`
  // op answers and what a `residency` event carries.
  protocol::StatusReply for_tenant(protocol::StatusReply status, const std::string& tenant) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::string>> tenants_;  // blob -> tenants (few)
};

// The one thread owning the daemon's Catalog (one SQLite connection). Tasks run in post order.
class CatalogWorker {
 public:
  using Task = std::function<void(catalog::Catalog&)>;
  // Opens the catalog on the worker thread; throws what opening throws (from start()).
  void start(const std::filesystem::path& data_dir, catalog::CatalogOptions options);
  void post(Task task);
  // Runs every task already posted, then joins. Idempotent.
  void stop();
  ~CatalogWorker() { stop(); }

 private:
  void loop(const std::filesystem::path& data_dir, const catalog::CatalogOptions& options,
            std::promise<void>* opened);
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mutex_
  bool stopping_ = false;   // guarded by mutex_
  std::thread thread_;
};

// The front thread's own figures, which only it can compute (front.h), mirrored for readers on
// other threads (the metrics endpoint). Relaxed atomics: each value is exact when stored; the
// two are not read as one snapshot.
struct FrontFigures {
  std::atomic<uint64_t> queue_depth{0};    // requests in flight; stored at every change
  std::atomic<double> tokens_per_s{0.0};   // sampled tokens/s, the last ~10 s; once a second
};

class RunManager;
class RewardTester;
struct DatasetCache;

struct Daemon {
  Daemon();
  ~Daemon();
  ServiceConfig config;
  Paths paths;
  std::shared_ptr<spdlog::logger> log;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  // The served bases; bases[0] is the default (a request's base_model "").
  std::vector<std::unique_ptr<ServedBase>> bases;
  std::unique_ptr<adapters::BlobStore> blobs;  // shared by every base's residency tiers

  // The base `id` ("" = the default). Throws not_found naming the served ids.
  ServedBase& base(std::string_view id) const;
  ServedBase* find_base(std::string_view id) const;
  ServedBase& default_base() const { return *bases.front(); }
  std::string served_ids() const;  // "'a', 'b'"

  std::map<std::string, std::string> tokens;  // token -> tenant
  SessionTable sessions;
  TenantQuotas quotas{config};  // sampling work in flight per tenant (tenant_quotas.h)
  ResolutionCache resolutions;
  AdapterOwners owners;
  CatalogWorker catalog;
  std::unique_ptr<RunManager> runs;  // GRPO runs; stopped before the scheduler
  std::unique_ptr<RewardTester> reward_tests;  // reward_test workers; stopped before the scheduler
  std::unique_ptr<DatasetCache> datasets;  // the datasets op (made in Daemon())
  std::unique_ptr<zmq::context_t> context;
  std::unique_ptr<ReplyChannel> replies;
  std::unique_ptr<ClusterState> cluster;  // the role and what its threads share (made in Daemon())
  FrontFigures front_figures;  // written by the front thread only
};

// The one mapping from an exception to a wire error (code, message), used by every reply path:
//   - protocol::ProtocolError (the decoder's and validator's) keeps its wire code;
//   - spindle::Error maps by wire_code (each layer below has already mapped its foreign
//     errors into it: SQLite and I/O in the catalog, CUDA in the GPU engine, errno names);
//   - std::bad_alloc -> resource_exhausted ("out of host memory");
//   - anything else -> internal with its message (a kernel's contract violation names the
//     kernel itself, kernel_error.h: the engine passed bad shapes, a bug).
std::pair<std::string, std::string> wire_error(const std::exception& e);
const char* wire_code(ErrorCode code);
// The ErrorCode a wire code maps back to (a worker's error seen on the coordinator): the
// inverse of wire_code where it has one; unavailable, overloaded and the rest are resource or
// internal.
ErrorCode error_code_of(const std::string& wire);

// The base the policy is on. Throws Error(failed_precondition) when that base is not
// served here.
ServedBase& served_base_of(const Daemon& d, const catalog::Policy& policy);

// A request's completion bound: `requested`, or for 0 (Tinker's None) what the base's context
// leaves after `prompt_tokens`, capped at max_sample_tokens. Throws invalid_argument naming
// `what` when the prompt leaves no room.
int32_t max_tokens_for(const Daemon& d, const ServedBase& base, int32_t requested,
                       size_t prompt_tokens, std::string_view what);

// `overloaded` for a submit to `base`'s scheduler that was refused (its queue is full).
void reply_scheduler_full(Daemon& d, const Call& call, const ServedBase& base);

// Sends the error for `e` on `call` (and counts it as failed).
void reply_exception(Daemon& d, const Call& call, const std::exception& e);

}  // namespace spindle::service
