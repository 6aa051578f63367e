#include "daemon_state.h"

#include <algorithm>
#include <new>

#include "reward_tests.h"
#include "run_manager.h"
#include "worker_ops.h"

#include <random>

#include "spindle/core/error.h"

namespace spindle::service {

Daemon::Daemon()
    : datasets(std::make_unique<DatasetCache>()),
      cluster(std::make_unique<ClusterState>(Role::standalone)) {}
Daemon::~Daemon() = default;

namespace {

std::string random_hex(size_t bytes) {
  static thread_local std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xffu;
    s += kHex[v >> 4];
    s += kHex[v & 15];
  }
  return s;
}

}  // namespace

std::string SessionTable::new_id() { return "s-" + random_hex(12); }

void SessionTable::set_worker(const std::string& id, uint32_t worker) {
  std::lock_guard lock(mutex_);
  if (auto it = sessions_.find(id); it != sessions_.end()) it->second.session.worker = worker;
}

void SessionTable::set_ranks(const std::string& id, std::vector<uint32_t> ranks,
                             uint32_t generation) {
  std::lock_guard lock(mutex_);
  if (auto it = sessions_.find(id); it != sessions_.end()) {
    it->second.session.worker = ranks.empty() ? it->second.session.worker : ranks[0];
    it->second.session.ranks = std::move(ranks);
    it->second.session.generation = generation;
  }
}

void SessionTable::set_restore(const std::string& id, const std::string& revision, bool optimizer) {
  std::lock_guard lock(mutex_);
  if (auto it = sessions_.find(id); it != sessions_.end()) {
    it->second.session.restore_revision = revision;
    it->second.session.restore_optimizer = optimizer;
  }
}

std::string SessionTable::add(Session s) {
  std::lock_guard lock(mutex_);
  while (s.id.empty() || sessions_.count(s.id) != 0) s.id = new_id();
  const std::string id = s.id;
  if (const auto r = reserved_.find(s.tenant); r != reserved_.end()) {
    if (--r->second == 0) reserved_.erase(r);
  }
  sessions_.emplace(id, Entry{std::move(s), Clock::now(), false, false, {}});
  return id;
}

void SessionTable::reserve(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  ++reserved_[tenant];
}

void SessionTable::unreserve(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  const auto r = reserved_.find(tenant);
  if (r != reserved_.end() && --r->second == 0) reserved_.erase(r);
}

size_t SessionTable::held_by(const std::string& tenant) const {
  std::lock_guard lock(mutex_);
  const auto r = reserved_.find(tenant);
  size_t n = r == reserved_.end() ? 0 : r->second;
  for (const auto& [id, e] : sessions_) n += e.session.tenant == tenant ? 1 : 0;
  return n;
}

std::optional<Session> SessionTable::find(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.session.tenant != tenant) return std::nullopt;
  it->second.renewed = Clock::now();
  return it->second.session;
}

std::vector<std::string> SessionTable::renew(const std::string& tenant,
                                             const std::vector<std::string>& ids) {
  std::vector<std::string> unknown;
  const auto now = Clock::now();
  std::lock_guard lock(mutex_);
  for (const std::string& id : ids) {
    const auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.session.tenant != tenant) {
      unknown.push_back(id);
    } else {
      it->second.renewed = now;
    }
  }
  return unknown;
}

std::vector<Session> SessionTable::of_tenant(const std::string& tenant) const {
  std::lock_guard lock(mutex_);
  std::vector<Session> out;
  for (const auto& [id, e] : sessions_) {
    if (e.session.tenant == tenant) out.push_back(e.session);
  }
  return out;
}

std::vector<Session> SessionTable::take_expired(Clock::time_point now, Clock::duration lease) {
  std::vector<Session> out;
  std::lock_guard lock(mutex_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    // A session waiting on its own load_state is busy, not silent.
    if (!it->second.blocked && !it->second.draining && now - it->second.renewed > lease) {
      out.push_back(std::move(it->second.session));
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void SessionTable::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  sessions_.erase(id);
}

size_t SessionTable::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

size_t SessionTable::size_on(const ServedBase* base) const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [id, e] : sessions_) n += e.session.base == base ? 1 : 0;
  return n;
}

bool SessionTable::run_or_defer(const std::string& id, Task task) {
  {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) return false;
    if (it->second.blocked || it->second.draining) {
      it->second.deferred.push_back(std::move(task));
      return true;
    }
  }
  task();
  return true;
}

void SessionTable::block(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(id);
  if (it != sessions_.end()) it->second.blocked = true;
}

void SessionTable::unblock(const std::string& id) {
  {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    it->second.blocked = false;
    it->second.draining = true;  // new arrivals queue behind the deferred ones
  }
  for (;;) {
    Task next;
    {
      std::lock_guard lock(mutex_);
      const auto it = sessions_.find(id);
      if (it == sessions_.end()) return;
      if (it->second.blocked || it->second.deferred.empty()) {
        it->second.draining = false;
        return;
      }
      next = std::move(it->second.deferred.front());
      it->second.deferred.pop_front();
    }
    next();
  }
}

ServedBase* Daemon::find_base(std::string_view id) const {
  if (id.empty()) return bases.empty() ? nullptr : bases.front().get();
  for (const auto& b : bases)
    if (b->id == id) return b.get();
  return nullptr;
}

ServedBase& Daemon::base(std::string_view id) const {
  ServedBase* b = find_base(id);
  SPINDLE_CHECK(b != nullptr, not_found, "base '{}' is not served here; served: {}", id,
                served_ids());
  return *b;
}

std::string Daemon::served_ids() const {
  std::string out;
  for (const auto& b : bases) out += (out.empty() ? "'" : ", '") + b->id + "'";
  return out;
}

std::optional<ResolvedAdapter> ResolutionCache::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void ResolutionCache::put(const std::string& key, ResolvedAdapter value) {
  std::lock_guard lock(mutex_);
  if (entries_.size() >= 100000) entries_.clear();  // bound memory; entries are cheap to redo
  entries_[key] = std::move(value);
}

void ResolutionCache::drop_policy(const std::string& tenant, const std::string& policy) {
  std::lock_guard lock(mutex_);
  const std::string prefix = tenant + "/" + policy + "@";
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = entries_.erase(it);
  }
}

void ResolutionCache::drop_revision(const std::string& tenant, const std::string& policy,
                                    const std::string& revision_id) {
  std::lock_guard lock(mutex_);
  entries_.erase(key(tenant, policy, revision_id));
}

void AdapterOwners::note(const std::string& blob, const std::string& tenant) {
  if (blob.empty()) return;
  std::lock_guard lock(mutex_);
  if (tenants_.size() >= 100000 && !tenants_.count(blob)) tenants_.clear();
  std::vector<std::string>& t = tenants_[blob];
  if (std::find(t.begin(), t.end(), tenant) == t.end()) t.push_back(tenant);
}

bool AdapterOwners::owns(const std::string& tenant, const std::string& blob) const {
  std::lock_guard lock(mutex_);
  const auto it = tenants_.find(blob);
  return it != tenants_.end() &&
         std::find(it->second.begin(), it->second.end(), tenant) != it->second.end();
}

protocol::StatusReply AdapterOwners::for_tenant(protocol::StatusReply status,
                                                const std::string& tenant) const {
  std::erase_if(status.placements,
                [&](const protocol::PlacementInfo& p) { return !owns(tenant, p.revision_id); });
  return status;
}

void CatalogWorker::start(const std::filesystem::path& data_dir, catalog::CatalogOptions options) {
  std::promise<void> opened;
  auto ready = opened.get_future();
  thread_ = std::thread([this, data_dir, options = std::move(options), &opened] {
    loop(data_dir, options, &opened);
  });
  try {
    ready.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

void CatalogWorker::loop(const std::filesystem::path& data_dir,
                         const catalog::CatalogOptions& options, std::promise<void>* opened) {
  std::unique_ptr<catalog::Catalog> cat;
  try {
    cat = std::make_unique<catalog::Catalog>(data_dir, options);
  } catch (...) {
    opened->set_exception(std::current_exception());
    return;
  }
  opened->set_value();
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything posted has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task(*cat);  // tasks catch their own errors and reply
  }
}

void CatalogWorker::post(Task task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void CatalogWorker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

const char* wire_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return protocol::errc::invalid_argument;
    case ErrorCode::not_found: return protocol::errc::not_found;
    case ErrorCode::format: return protocol::errc::invalid_argument;
    case ErrorCode::unsupported: return protocol::errc::unsupported;
    case ErrorCode::resource: return protocol::errc::resource_exhausted;
    case ErrorCode::already_exists: return protocol::errc::already_exists;
    case ErrorCode::failed_precondition: return protocol::errc::failed_precondition;
    case ErrorCode::data_loss: return protocol::errc::data_loss;
    case ErrorCode::io: return protocol::errc::internal;
    case ErrorCode::internal: return protocol::errc::internal;
  }
  return protocol::errc::internal;
}

ErrorCode error_code_of(const std::string& wire) {
  using namespace protocol;
  for (const ErrorCode c : kAllErrorCodes) {
    if (c != ErrorCode::format && c != ErrorCode::io && wire == wire_code(c)) return c;
  }
  if (wire == errc::unavailable || wire == errc::overloaded || wire == errc::limit_exceeded) {
    return ErrorCode::resource;
  }
  return ErrorCode::internal;
}

std::pair<std::string, std::string> wire_error(const std::exception& e) {
  if (const auto* pe = dynamic_cast<const protocol::ProtocolError*>(&e)) {
    return {pe->code(), pe->what()};
  }
  if (const auto* se = dynamic_cast<const Error*>(&e)) {
    return {wire_code(se->code()), se->what()};
  }
  if (dynamic_cast<const std::bad_alloc*>(&e)) {
    return {protocol::errc::resource_exhausted, "out of host memory while serving the request"};
  }
  return {protocol::errc::internal, e.what()};
}

ServedBase& served_base_of(const Daemon& d, const catalog::Policy& policy) {
  if (ServedBase* b = d.find_base(policy.base_id); b && !policy.base_id.empty()) return *b;
  SPINDLE_THROW(failed_precondition,
                "policy {} is on base '{}', which this server does not serve (served: {})",
                policy.address(), policy.base_id, d.served_ids());
}

int32_t max_tokens_for(const Daemon& d, const ServedBase& base, int32_t requested,
                       size_t prompt_tokens, std::string_view what) {
  if (requested != 0) return requested;
  const int64_t context = base.weights.config.max_seq_len;
  const int64_t room = context - int64_t(prompt_tokens);
  SPINDLE_CHECK(room >= 1, invalid_argument,
                "{}: {} tokens leave no room in the context of {} for a completion", what,
                prompt_tokens, context);
  return int32_t(std::min<int64_t>(room, d.config.limits.max_sample_tokens));
}

void reply_scheduler_full(Daemon& d, const Call& call, const ServedBase& base) {
  d.replies->overloaded(call, base.scheduler->stats().queued, d.config.max_queue,
                        d.config.retry_after_ms);
}

void reply_exception(Daemon& d, const Call& call, const std::exception& e) {
  auto [code, message] = wire_error(e);
  d.replies->error(call, std::move(code), std::move(message));
}

}  // namespace spindle::service
