#include "cluster_hub.h"

#include <condition_variable>
#include <deque>

#include "peer_send.h"
#include "spindle/core/error.h"

namespace spindle::service {

namespace cw = cluster_wire;
using namespace protocol;

// One thread reading blobs for workers, so the front thread never touches files.
struct ClusterHub::BlobReader {
  explicit BlobReader(Daemon& d) : d_(d), thread_([this] { loop(); }) {}
  ~BlobReader() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::string identity, std::string id, std::string blob) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back({std::move(identity), std::move(id), std::move(blob)});
    }
    cv_.notify_one();
  }

 private:
  struct Job {
    std::string identity, id, blob;
  };
  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) break;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      std::string code, payload;
      try {
        payload = d_.blobs->get(job.blob);
      } catch (const std::exception& e) {
        std::tie(code, payload) = wire_error(e);
      }
      d_.replies->send_raw(kClusterRoute, {job.identity, std::string(cw::kBlob), job.id, code,
                                           std::move(payload)});
    }
    close_thread_push();
  }
  Daemon& d_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread thread_;
};

ClusterHub::ClusterHub(Daemon& d, zmq::socket_t& router, std::string endpoint, RelayFn relay,
                       FailFn fail)
    : d_(d),
      router_(router),
      endpoint_(std::move(endpoint)),
      relay_(std::move(relay)),
      fail_(std::move(fail)),
      placement_({.cold_candidates = 2,
                  .spill_queue = d.config.spill_queue,
                  .max_replicas = std::max<uint32_t>(1, d.config.max_replicas)}),
      reader_(std::make_unique<BlobReader>(d)) {}

ClusterHub::~ClusterHub() = default;

void ClusterHub::on_message(std::vector<std::string> parts) {
  if (parts.size() < 2) return;
  const std::string& identity = parts[0];
  const std::string& kind = parts[1];
  try {
    if (kind == cw::kHello && parts.size() == 3) return on_hello(identity, parts[2]);
    if (kind == cw::kReply && parts.size() >= 4) return on_reply(parts);
    if (kind == cw::kBlobGet && parts.size() == 4) return on_blob_get(identity, parts);
    if ((kind == cw::kStoreSet && parts.size() == 5) ||
        (kind == cw::kStoreGet && parts.size() == 4))
      return on_store(identity, parts);
    d_.log->warn("cluster: dropped a '{}' message of {} frames", kind.substr(0, 32), parts.size());
  } catch (const std::exception& e) {
    d_.log->warn("cluster: dropped a '{}' message: {}", kind.substr(0, 32), e.what());
  }
}

void ClusterHub::on_hello(const std::string& identity, const std::string& body) {
  const cw::WorkerHello hello = cw::decode_hello(body);
  auto refuse = [&](const std::string& why) {
    d_.log->warn("cluster: refused worker '{}' (pid {} on {}): {}", hello.name, hello.pid,
                 hello.host, why);
    send_to_peer(router_, std::vector<zmq::const_buffer>{
                              zmq::buffer(identity), zmq::buffer(cw::kWelcome),
                              zmq::buffer(cw::encode(cw::Welcome{0, why}))});
  };
  if (!d_.find_base(hello.base)) {
    return refuse(fmt::format("this coordinator does not serve base '{}' (it serves {}): start it "
                              "with --model for that base",
                              hello.base, d_.served_ids()));
  }
  cluster::WorkerId id = 0;
  try {
    id = placement_.add_worker(hello.name, hello.base);  // same name: same id, alive again
  } catch (const Error& e) {
    return refuse(e.what());
  }
  Worker& w = workers_[id];
  const auto now = Clock::now();
  if (w.alive && w.identity != identity) {
    if (now - w.last_seen < std::chrono::duration<double>(d_.config.worker_timeout_s)) {
      return refuse(fmt::format("a worker named '{}' is already registered (pid {} on {}): give "
                                "each worker its own --worker-name",
                                hello.name, w.hello.pid, w.hello.host));
    }
    lose(id, "replaced by a new process under its name");
    placement_.add_worker(hello.name, hello.base);
  }
  if (hello.draining) {
    if (w.alive) lose(id, "it is draining (SIGTERM)");
    w.hello = hello;
    w.last_seen = now;
    return;
  }
  const bool joined = !w.alive;
  w.identity = identity;
  w.hello = hello;
  w.last_seen = now;
  if (joined) {
    w.alive = true;
    w.joined = now;
    d_.cluster->set_live(id, hello.base, true);
    d_.log->info("cluster: worker {} '{}' joined: base '{}' on {} (pid {} on {}, {} serving slots)",
                 id, hello.name, hello.base, hello.device, hello.pid, hello.host,
                 hello.serving_slots);
  }
  update_load(id);
  send_to_peer(router_, std::vector<zmq::const_buffer>{
                            zmq::buffer(identity), zmq::buffer(cw::kWelcome),
                            zmq::buffer(cw::encode(cw::Welcome{id, ""}))});
}

void ClusterHub::update_load(uint32_t id) {
  const Worker& w = workers_.at(id);
  cluster::WorkerLoad load;
  // The coordinator's own count of what it has in flight there is current; the worker's is a
  // heartbeat old. Take the larger.
  load.queue_depth = std::max(w.in_flight, w.hello.queue_depth);
  load.loader_queue = w.hello.loader_queue;
  load.slots = w.hello.serving_slots;
  load.slots_used = w.hello.slots_used;
  load.tokens_per_s = w.hello.tokens_per_s;
  placement_.update_load(id, load);
}

void ClusterHub::on_reply(const std::vector<std::string>& parts) {
  uint64_t id = 0;
  if (!cw::parse_id(parts[2], id) || parts[2].size() != 9) {
    d_.log->warn("cluster: dropped a reply with a malformed id frame");
    return;
  }
  const uint8_t flags = uint8_t(parts[2][8]);
  const auto it = pending_.find(id);
  if (it == pending_.end()) {
    d_.log->debug("cluster: dropped a reply to forward {} (not in flight: its worker was lost)", id);
    return;
  }
  const bool final = (flags & cw::kReplyFinal) != 0;
  ForwardOutcome outcome;
  outcome.final = final;
  outcome.ok = (flags & cw::kReplyOk) != 0;
  outcome.worker = it->second.worker;
  outcome.parts.assign(parts.begin() + 3, parts.end());
  if (!outcome.ok) {
    try {
      const Reply r = decode_reply(outcome.parts);
      outcome.code = r.error.code;
      outcome.message = r.error.message;
    } catch (const std::exception& e) {
      outcome.code = errc::internal;
      outcome.message = std::string("a worker's error reply does not decode: ") + e.what();
    }
  }
  Forward& f = it->second.forward;
  if (final) {
    Worker& w = workers_.at(it->second.worker);
    if (w.in_flight > 0) --w.in_flight;
    Forward done = std::move(f);
    pending_.erase(it);
    finish(done, outcome, true);
    if (workers_.at(outcome.worker).alive) update_load(outcome.worker);
  } else {
    finish(f, outcome, false);
  }
}

void ClusterHub::finish(Forward& f, ForwardOutcome& outcome, bool final) {
  const bool relay = f.done ? f.done(outcome) : true;
  if (!relay || f.call.envelope.empty()) return;
  if (outcome.lost) return fail_(f.call, outcome.code, outcome.message);  // counted there
  if (final) {  // the worker counted its reply; the coordinator counts what its client got
    (outcome.ok ? d_.replies->served : d_.replies->failed).fetch_add(1, std::memory_order_relaxed);
    d_.replies->counters.count(protocol::op_name(f.call.op), outcome.ok ? "ok" : outcome.code);
  }
  relay_(f.call, std::move(outcome.parts), final);
}

void ClusterHub::fail_forward(Forward& f, uint32_t worker, const std::string& message) {
  ForwardOutcome outcome;
  outcome.lost = true;
  outcome.final = true;
  outcome.code = errc::unavailable;
  outcome.message = message;
  outcome.worker = worker;
  finish(f, outcome, true);
}

void ClusterHub::on_blob_get(const std::string& identity, const std::vector<std::string>& parts) {
  reader_->post(identity, parts[2], parts[3]);
}

// A data-parallel rank's rendezvous: answered at once from the coordinator's store (a lookup
// of a key not there yet answers "0"; the rank polls).
void ClusterHub::on_store(const std::string& identity, const std::vector<std::string>& parts) {
  constexpr size_t kMaxKeys = 1 << 16;
  cluster::MemoryStore& store = d_.cluster->store();
  std::string found = "1", value;
  if (parts[1] == cw::kStoreSet) {
    if (store.size() < kMaxKeys) {
      store.set(parts[3], parts[4]);
    } else {
      d_.log->error("cluster: the rendezvous store holds {} keys: '{}' refused", kMaxKeys,
                    parts[3]);
      found = "0";
    }
  } else if (std::optional<std::string> v = store.get(parts[3])) {
    value = std::move(*v);
  } else {
    found = "0";
  }
  send_to_peer(router_, std::vector<zmq::const_buffer>{
                            zmq::buffer(identity), zmq::buffer(cw::kStore), zmq::buffer(parts[2]),
                            zmq::buffer(found), zmq::buffer(value)});
}

void ClusterHub::send_forwards() {
  for (Forward& f : d_.cluster->take_forwards()) send_forward(f);
}

// Places (or takes the pinned worker of) `f` and sends it. A worker whose connection is gone
// (the ROUTER no longer knows its identity: it died, or reconnected under a new one) is lost at
// once rather than at its heartbeat timeout, and an unpinned forward goes to the next worker.
void ClusterHub::send_forward(Forward& f) {
  for (;;) {
    std::optional<cluster::WorkerId> target;
    if (f.worker != kLocalWorker) {
      const auto w = workers_.find(f.worker);
      if (w == workers_.end() || !w->second.alive) {
        return fail_forward(f, f.worker,
                            fmt::format("worker {} is gone (lost before this request reached it): "
                                        "retry",
                                        f.worker));
      }
      target = f.worker;
    } else if (f.session && f.header.dp_size > 1) {
      std::string why;
      target = place_rank(f, why);
      if (!target) return fail_forward(f, kLocalWorker, why);
    } else if (f.session) {
      target = placement_.route_session(f.policy_key, f.base);
    } else {
      target = placement_.route_sample(f.policy_key, f.base);
    }
    if (!target) {
      return fail_forward(f, kLocalWorker,
                          fmt::format("no live worker serves base '{}': retry when one has joined",
                                      f.base));
    }
    Worker& w = workers_.at(*target);
    const uint64_t id = next_forward_++;
    const std::string header = cw::encode(f.header);
    const std::string idf = cw::id_frame(id);
    std::vector<zmq::const_buffer> out{zmq::buffer(w.identity), zmq::buffer(cw::kForward),
                                       zmq::buffer(idf), zmq::buffer(header)};
    for (const std::string& r : f.request) out.push_back(zmq::buffer(r));
    const PeerSend sent = send_to_peer(router_, out);
    if (sent == PeerSend::unreachable) {
      lose(*target, "its connection is gone");
      continue;  // pinned: fails above; else the next worker in the policy's order
    }
    if (sent != PeerSend::sent) {
      return fail_forward(f, *target,
                          fmt::format("worker {} '{}' cannot be reached ({}): retry", *target,
                                      w.hello.name, peer_send_name(sent)));
    }
    ++w.forwarded;
    ++w.in_flight;
    update_load(*target);
    pending_.emplace(id, Pending{*target, std::move(f)});
    return;
  }
}

// Rank r of a data-parallel session goes to the r-th live worker of the policy's rendezvous
// order for its base; the ranks must all be on one kind of device (Gloo sums host memory, NCCL
// device memory: a group cannot mix them).
std::optional<cluster::WorkerId> ClusterHub::place_rank(const Forward& f, std::string& why) const {
  const std::vector<cluster::WorkerId> order = placement_.preference(f.policy_key, f.base);
  const uint32_t n = f.header.dp_size;
  if (order.size() < n) {
    why = fmt::format("data_parallel {} needs {} live workers serving base '{}'; {} are live", n, n,
                      f.base, order.size());
    return std::nullopt;
  }
  auto kind = [&](cluster::WorkerId w) {
    const std::string& dev = workers_.at(w).hello.device;
    return dev.substr(0, dev.find_first_of(":( "));
  };
  for (uint32_t r = 1; r < n; ++r) {
    if (kind(order[r]) != kind(order[0])) {
      why = fmt::format(
          "data_parallel {}: the chosen workers mix devices ({} and {}); a group "
          "sums on one kind of device",
          n, workers_.at(order[0]).hello.device, workers_.at(order[r]).hello.device);
      return std::nullopt;
    }
  }
  return order.at(f.header.dp_rank);
}

void ClusterHub::lose(uint32_t id, const std::string& why) {
  Worker& w = workers_.at(id);
  if (!w.alive) return;
  w.alive = false;
  const uint64_t moved = placement_.remove_worker(id);
  d_.cluster->set_live(id, w.hello.base, false);
  std::vector<Forward> failed;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.worker != id) {
      ++it;
      continue;
    }
    failed.push_back(std::move(it->second.forward));
    it = pending_.erase(it);
  }
  w.in_flight = 0;
  d_.log->warn("cluster: worker {} '{}' (pid {} on {}) lost: {}; {} request(s) in flight on it "
               "fail `unavailable`, {} polic(ies) lose a replica",
               id, w.hello.name, w.hello.pid, w.hello.host, why, failed.size(), moved);
  for (Forward& f : failed) {
    fail_forward(f, id,
                 fmt::format("worker {} '{}' was lost while serving this request ({}): retry", id,
                             w.hello.name, why));
  }
}

void ClusterHub::tick(Clock::time_point now) {
  const auto timeout = std::chrono::duration<double>(d_.config.worker_timeout_s);
  for (auto& [id, w] : workers_) {
    if (w.alive && now - w.last_seen > timeout) {
      lose(id, fmt::format("no heartbeat for {:.1f} s", d_.config.worker_timeout_s));
    }
  }
}

ClusterStatusReply ClusterHub::status() const {
  ClusterStatusReply out;
  out.role = "coordinator";
  out.cluster_endpoint = endpoint_;
  const auto now = Clock::now();
  for (const auto& [id, w] : workers_) {
    ClusterWorkerMsg m;
    m.id = id;
    m.name = w.hello.name;
    m.base = w.hello.base;
    m.device = w.hello.device;
    m.host = w.hello.host;
    m.pid = w.hello.pid;
    m.alive = w.alive;
    m.last_seen_ms = uint64_t(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - w.last_seen).count());
    m.base_bytes = w.hello.base_bytes;
    m.device_free_bytes = w.hello.device_free_bytes;
    m.serving_slots = w.hello.serving_slots;
    m.slots_used = w.hello.slots_used;
    m.queue_depth = std::max(w.in_flight, w.hello.queue_depth);
    m.loader_queue = w.hello.loader_queue;
    m.sessions = w.hello.sessions;
    m.tokens_per_s = w.hello.tokens_per_s;
    m.forwarded = w.forwarded;
    m.placed_policies = placement_.placed_on(id);
    out.workers.push_back(std::move(m));
  }
  out.placed_policies = placement_.placed_policies();
  out.replica_placements = placement_.replica_placements();
  return out;
}

}  // namespace spindle::service
