// Data-parallel training sessions (issue 17, docs/cluster.md "Data-parallel training"): one
// policy trained on N workers of a coordinator. The coordinator opens rank r on the r-th live
// worker of the policy's rendezvous order, all in one group "<session>.<generation>"; each
// forward / forward_backward is cut into N contiguous shards of about equal token counts (rank
// r gets shard r; an empty shard is not sent), and the replies are joined in data order;
// optim_step goes to every rank, each of which sums its gradients with the others
// (Trainer::reduce_gradients, Gloo or NCCL) before the same AdamW step, so every rank holds the
// same weights; saves snapshot rank 0; load_state and close go to every rank. The forwards of
// one op are posted together (ClusterState::post_all), so every worker receives the steps of
// its groups in one global order (scheduler.h's open_session says why that matters).
//
// A lost rank: the op in flight fails `unavailable`; the next call reopens every rank (a new
// generation of the group, on the workers placement picks now) from the restore point, as
// restore_session does for one worker, then runs.

#include <fmt/format.h>

#include <numeric>

#include "spindle/core/error.h"
#include "training_internal.h"

namespace spindle::service {

using namespace protocol;
namespace cw = cluster_wire;

namespace training {
namespace {

// The outcomes of one op's forwards, one per rank (a rank not sent to stays `skipped`).
struct Gather {
  explicit Gather(size_t n) : outs(n), skipped(n, false) {}
  std::vector<ForwardOutcome> outs;
  std::vector<bool> skipped;
  size_t left = 0;
};
using GatherDone = std::function<void(Gather&)>;

std::string group_name(const Session& s, uint32_t generation) {
  return fmt::format("{}.{}", s.id, generation);
}

// The first failed rank's error (a lost worker's first: it is the cause of its peers' failed
// sums), as "training session S (data_parallel N): rank r: message". False when all were ok.
bool first_failure(const Gather& g, const Session& s, std::string& code, std::string& message) {
  int pick = -1;
  for (size_t r = 0; r < g.outs.size(); ++r) {
    if (g.skipped[r] || g.outs[r].ok) continue;
    if (pick < 0 || (g.outs[r].lost && !g.outs[size_t(pick)].lost)) pick = int(r);
  }
  if (pick < 0) return false;
  const ForwardOutcome& o = g.outs[size_t(pick)];
  code = o.lost ? std::string(errc::unavailable) : o.code;
  message = fmt::format(
      "training session {} (data_parallel {}): rank {}{}: {}", s.id, g.outs.size(), pick,
      o.lost ? fmt::format(" (worker {} lost)", o.worker) : std::string(), o.message);
  return true;
}

// Posts one forward per rank (requests[r] empty: rank r is skipped) pinned to `workers[r]`, or
// placed as rank r of a new group when `workers` is empty; `done` runs on the front thread when
// every one has its final outcome, and answers the client itself.
void fan_out(Daemon& d, const Call& call, const Session& s, const std::vector<uint32_t>& workers,
             std::vector<cw::ForwardHeader> headers, std::vector<std::optional<Request>> requests,
             GatherDone done) {
  const size_t n = requests.size();
  auto gather = std::make_shared<Gather>(n);
  for (size_t r = 0; r < n; ++r) gather->skipped[r] = !requests[r].has_value();
  gather->left = size_t(std::count(gather->skipped.begin(), gather->skipped.end(), false));
  if (gather->left == 0) return done(*gather);
  auto shared_done = std::make_shared<GatherDone>(std::move(done));
  std::vector<Forward> fs;
  for (size_t r = 0; r < n; ++r) {
    if (!requests[r]) continue;
    ForwardDone rank_done = [gather, shared_done, r](ForwardOutcome& o) {
      if (!o.final) return false;  // no data-parallel op streams
      gather->outs[r] = std::move(o);
      if (--gather->left == 0) (*shared_done)(*gather);
      return false;
    };
    if (workers.empty()) {  // placed by the hub as rank header.dp_rank (ClusterHub::place_rank)
      fs.push_back(placed_forward(call, s, std::move(headers[r]), std::move(*requests[r]),
                                  std::move(rank_done)));
    } else {
      Session on = s;
      on.worker = workers[r];
      fs.push_back(pinned_forward(call, on, std::move(headers[r]), std::move(*requests[r]),
                                  std::move(rank_done)));
    }
  }
  d.cluster->post_all(std::move(fs), *d.replies);
}

// Closes the ranks of `workers` still alive (no client waits) and forgets the group's keys.
void close_ranks(Daemon& d, const Session& s, const std::vector<uint32_t>& workers,
                 uint32_t generation) {
  Call none;
  none.tenant = s.tenant;
  none.op = Op::close_training;
  std::vector<Forward> fs;
  for (uint32_t w : workers) {
    if (!d.cluster->alive(w)) continue;
    Session on = s;
    on.worker = w;
    fs.push_back(pinned_forward(none, on, session_header(s, cw::ForwardKind::request),
                                request_of(none, SessionRequest{s.id}),
                                [](ForwardOutcome&) { return false; }));
  }
  if (!fs.empty()) d.cluster->post_all(std::move(fs), *d.replies);
  d.cluster->store().erase_group(group_name(s, generation));
}

using Opened = std::function<void(std::vector<uint32_t> workers, const ForwardOutcome& rank0)>;
using Failed = std::function<void(const std::string& code, const std::string& message)>;

// Opens every rank of `s` (s.ranks.size() is ignored: s.data_parallel ranks) as generation
// `generation` from the open header `h`, with `request` as each rank's open request.
void open_ranks(Daemon& d, const Call& call, const Session& s, uint32_t n, uint32_t generation,
                const cw::ForwardHeader& h, const Request& request, Opened opened, Failed failed) {
  std::vector<cw::ForwardHeader> headers(n, h);
  std::vector<std::optional<Request>> requests(n, request);
  for (uint32_t r = 0; r < n; ++r) {
    headers[r].dp_group = group_name(s, generation);
    headers[r].dp_rank = r;
    headers[r].dp_size = n;
    headers[r].dp_timeout_ms = uint32_t(std::clamp(d.config.dp_timeout_s, 0.001, 3600.0) * 1000);
  }
  fan_out(d, call, s, {}, std::move(headers), std::move(requests),
          [&d, s, generation, opened = std::move(opened), failed = std::move(failed)](Gather& g) {
            std::vector<uint32_t> workers;
            for (const ForwardOutcome& o : g.outs) {
              if (o.ok) workers.push_back(o.worker);
            }
            std::string code, message;
            if (first_failure(g, s, code, message)) {
              close_ranks(d, s, workers, generation);
              return failed(code, message);
            }
            opened(std::move(workers), g.outs[0]);
          });
}

// A rank's TrainingSessionReply, reporting the session's data_parallel.
TrainingSessionReply session_reply_of(const Daemon& d, const ForwardOutcome& o, uint32_t n) {
  Reply r = decode_reply(o.parts, d.config.limits);
  TrainingSessionReply out = std::get<TrainingSessionReply>(r.body);
  out.data_parallel = n;
  return out;
}

// Contiguous shards of the data with about equal token counts: shard r starts at the first
// datum that starts at or past r/n of the tokens (so a batch of fewer data than ranks leaves
// the last shards empty). Returns n + 1 cut points.
std::vector<size_t> shard_cuts(const ForwardBackwardRequest& fb, size_t n) {
  std::vector<int64_t> tokens;
  for (const DatumMsg& m : fb.data) {
    tokens.push_back(m.model_input.shape.empty() ? 0 : m.model_input.shape[0]);
  }
  const int64_t total = std::accumulate(tokens.begin(), tokens.end(), int64_t(0));
  std::vector<size_t> cuts(n + 1, fb.data.size());
  cuts[0] = 0;
  int64_t before = 0;  // tokens of the data before datum i
  size_t r = 1;
  for (size_t i = 0; i < fb.data.size(); ++i) {
    while (r < n && before * int64_t(n) >= int64_t(r) * total && total > 0) cuts[r++] = i;
    before += tokens[i];
  }
  return cuts;
}

TensorRef copy_tensor(const TensorRef& ref, const Frames& from, Frames& to) {
  SPINDLE_CHECK(ref.frame < from.size(), invalid_argument, "tensor frame {} of {} frames",
                ref.frame, from.size());
  TensorRef out = ref;
  out.frame = uint32_t(to.size());
  to.push_back(from[ref.frame]);
  return out;
}

void dp_forward_backward(Daemon& d, const Call& call, const Session& s, const Request& request) {
  const auto& fb = std::get<ForwardBackwardRequest>(request.body);
  const size_t n = s.ranks.size();
  const std::vector<size_t> cuts = shard_cuts(fb, n);
  std::vector<std::optional<Request>> requests(n);
  std::vector<cw::ForwardHeader> headers(n, session_header(s, cw::ForwardKind::request));
  for (size_t r = 0; r < n; ++r) {
    if (cuts[r] == cuts[r + 1]) continue;
    ForwardBackwardRequest shard;
    shard.session_id = fb.session_id;
    shard.loss_fn = fb.loss_fn;
    shard.loss_fn_config = fb.loss_fn_config;
    Frames frames;
    for (size_t i = cuts[r]; i < cuts[r + 1]; ++i) {
      DatumMsg m;
      m.model_input = copy_tensor(fb.data[i].model_input, request.frames, frames);
      for (const NamedTensor& t : fb.data[i].loss_fn_inputs) {
        m.loss_fn_inputs.push_back({t.name, copy_tensor(t.tensor, request.frames, frames)});
      }
      shard.data.push_back(std::move(m));
    }
    Request q = request_of(call, std::move(shard));
    q.frames = std::move(frames);
    requests[r] = std::move(q);
  }
  fan_out(d, call, s, s.ranks, std::move(headers), std::move(requests), [&d, call, s](Gather& g) {
    std::string code, message;
    if (first_failure(g, s, code, message)) return d.replies->error(call, code, message);
    try {
      ForwardBackwardReply out;
      Frames frames;
      double loss = 0.0, tokens = 0.0, clipped = 0.0;
      for (size_t r = 0; r < g.outs.size(); ++r) {
        if (g.skipped[r]) continue;
        const Reply rep = decode_reply(g.outs[r].parts, d.config.limits);
        const auto& b = std::get<ForwardBackwardReply>(rep.body);
        for (const auto& outputs : b.loss_fn_outputs) {
          std::vector<NamedTensor> copied;
          for (const NamedTensor& t : outputs) {
            copied.push_back({t.name, copy_tensor(t.tensor, rep.frames, frames)});
          }
          out.loss_fn_outputs.push_back(std::move(copied));
        }
        double n_tokens = 0.0, clip = 0.0;
        for (const NamedValue& v : b.metrics) {
          if (v.name == "loss:sum") loss += v.value;
          if (v.name == "n_tokens:sum") n_tokens = v.value;
          if (v.name == "clip_fraction:mean") clip = v.value;
        }
        tokens += n_tokens;
        clipped += clip * n_tokens;
      }
      out.metrics = {{"loss:sum", loss},
                     {"n_tokens:sum", tokens},
                     {"clip_fraction:mean", tokens > 0 ? clipped / tokens : 0.0}};
      d.replies->ok(call, std::move(out), std::move(frames));
    } catch (const std::exception& e) {
      reply_exception(d, call, e);
    }
  });
}

// optim_step, and any op every rank runs with the same request: rank 0's reply answers (the
// ranks' replies agree: the same summed gradient, the same step).
void dp_all_ranks(Daemon& d, const Call& call, const Session& s, const Request& request,
                  std::function<void()> after_ok = {}) {
  const size_t n = s.ranks.size();
  std::vector<std::optional<Request>> requests(n, request);
  std::vector<cw::ForwardHeader> headers(n, session_header(s, cw::ForwardKind::request));
  fan_out(d, call, s, s.ranks, std::move(headers), std::move(requests),
          [&d, call, s, after_ok = std::move(after_ok)](Gather& g) {
            std::string code, message;
            if (first_failure(g, s, code, message)) return d.replies->error(call, code, message);
            if (after_ok) after_ok();
            try {
              Reply rep = decode_reply(g.outs[0].parts, d.config.limits);
              d.replies->ok(call, std::move(rep.body), std::move(rep.frames));
            } catch (const std::exception& e) {
              reply_exception(d, call, e);
            }
          });
}

void dp_close(Daemon& d, const Call& call, const Session& s) {
  d.sessions.erase(s.id);
  std::vector<uint32_t> live;
  for (uint32_t w : s.ranks) {
    if (d.cluster->alive(w)) live.push_back(w);
  }
  const size_t n = s.ranks.size();
  std::vector<std::optional<Request>> requests(n);
  for (size_t r = 0; r < n; ++r) {
    if (d.cluster->alive(s.ranks[r])) requests[r] = request_of(call, SessionRequest{s.id});
  }
  std::vector<cw::ForwardHeader> headers(n, session_header(s, cw::ForwardKind::request));
  fan_out(d, call, s, s.ranks, std::move(headers), std::move(requests), [&d, call, s](Gather&) {
    // A rank that failed to close (its worker died meanwhile) has nothing left to close.
    d.cluster->store().erase_group(group_name(s, s.generation));
    d.replies->ok(call, Empty{});
  });
}

// load_state: every rank loads the revision (remote_load reads it once, here).
void dp_load(Daemon& d, const Call& call, const Session& s, const Request& request) {
  remote_load(
      d, call, s, request,
      [&d, call, s, request](cw::ForwardHeader h, const std::string& rev, bool with_optimizer) {
        const size_t n = s.ranks.size();
        fan_out(d, call, s, s.ranks, std::vector<cw::ForwardHeader>(n, h),
                std::vector<std::optional<Request>>(n, request),
                [&d, call, s, rev, with_optimizer, n](Gather& g) {
                  std::string code, message;
                  if (first_failure(g, s, code, message)) {
                    return d.replies->error(call, code, message);
                  }
                  d.sessions.set_restore(s.id, rev, with_optimizer);
                  try {
                    d.replies->ok(call, session_reply_of(d, g.outs[0], uint32_t(n)));
                  } catch (const std::exception& e) {
                    reply_exception(d, call, e);
                  }
                });
      });
}

// A rank's worker was lost: reopen every rank from the restore point (restore_session's rules)
// as the group's next generation, then run the request that found it lost.
void dp_restore(Daemon& d, const Call& call, const Session& s, const Request& request) {
  d.sessions.block(s.id);
  d.catalog.post([&d, call, s,
                  request = std::make_shared<Request>(request)](catalog::Catalog& cat) {
    try {
      const cw::ForwardHeader h = restore_header(d, cat, s);
      close_ranks(d, s, s.ranks, s.generation);
      Call open = call;  // the worker reads an open as a create_training (never relayed)
      open.op = Op::create_training;
      const uint32_t generation = s.generation + 1;
      const uint32_t n = uint32_t(s.ranks.size());
      open_ranks(
          d, call, s, n, generation, h, request_of(open, CreateTrainingRequest{}),
          [&d, call, s, request, generation](std::vector<uint32_t> workers, const ForwardOutcome&) {
            d.sessions.set_ranks(s.id, workers, generation);
            Session now = s;
            now.ranks = workers;
            now.worker = workers[0];
            now.generation = generation;
            d.log->warn(
                "tenant {}: data-parallel session {} on spindle://{}/{} lost a worker: "
                "its {} ranks reopened (group {}) from {}",
                s.tenant, s.id, s.tenant, s.policy, workers.size(), group_name(s, generation),
                s.restore_revision.empty() ? std::string("a fresh init")
                                           : "revision " + s.restore_revision);
            try {
              run_session_op(d, call, now, *request);
            } catch (const std::exception& e) {
              reply_exception(d, call, e);
            }
            d.sessions.unblock(s.id);
          },
          [&d, call, s](const std::string&, const std::string& message) {
            d.replies->error(call, errc::unavailable,
                             fmt::format("training session {} lost a worker and could not be "
                                         "reopened on {} workers: {}",
                                         s.id, s.ranks.size(), message));
            d.sessions.unblock(s.id);
          });
    } catch (const std::exception& e) {
      reply_exception(d, call, e);
      d.sessions.unblock(s.id);
    }
  });
}

}  // namespace

void close_dp_ranks(Daemon& d, const Session& s) {
  close_ranks(d, s, s.ranks, s.generation);
}

std::shared_ptr<AllReduce> forwarded_group(Daemon& d, const cw::ForwardHeader& h,
                                           const ServedBase& base) {
  if (h.dp_size <= 1) return {};
  // The worker's side of the coordinator's rendezvous store (ClusterState::store_call).
  class CoordinatorStore final : public cluster::RendezvousStore {
   public:
    explicit CoordinatorStore(Daemon& d) : d_(d) {}
    void set(const std::string& key, const std::string& value) override {
      d_.cluster->store_call(true, key, value, *d_.replies, std::chrono::seconds(30));
    }
    std::optional<std::string> get(const std::string& key) override {
      return d_.cluster->store_call(false, key, "", *d_.replies, std::chrono::seconds(30));
    }

   private:
    Daemon& d_;
  };
  cluster::GroupOptions o;
  o.group = h.dp_group;
  o.rank = int(h.dp_rank);
  o.size = int(h.dp_size);
  o.host = d.config.collective_host;
  o.timeout = std::chrono::milliseconds(std::max<uint32_t>(1, h.dp_timeout_ms));
  const engine::Device device = base.backend->device();
  o.cuda_device = device.kind == engine::DeviceKind::cuda ? device.index : -1;
  return cluster::make_all_reduce(std::make_shared<CoordinatorStore>(d), o);
}

void open_dp_session(Daemon& d, const Call& call, Request request, Session proto,
                     cw::ForwardHeader h, uint32_t n) {
  d.sessions.reserve(call.tenant);  // check_session_room counts it until add() or unreserve()
  open_ranks(
      d, call, proto, n, 0, h, request,
      [&d, call, proto, n](std::vector<uint32_t> workers, const ForwardOutcome& rank0) mutable {
        proto.worker = workers[0];
        proto.ranks = workers;
        try {
          TrainingSessionReply reply = session_reply_of(d, rank0, n);
          d.sessions.add(proto);
          d.log->info(
              "tenant {}: data-parallel session {} on spindle://{}/{} (base '{}', rank "
              "{}) on workers {}",
              proto.tenant, proto.id, proto.tenant, proto.policy, proto.base->id, proto.rank,
              fmt::join(workers, ", "));
          d.replies->ok(call, std::move(reply));
        } catch (const std::exception& e) {
          d.sessions.unreserve(call.tenant);
          close_ranks(d, proto, workers, 0);
          reply_exception(d, call, e);
        }
      },
      [&d, call](const std::string& code, const std::string& message) {
        d.sessions.unreserve(call.tenant);
        d.replies->error(call, code, message);
      });
}

void run_dp_session_op(Daemon& d, const Call& call, const Session& s, const Request& request) {
  const bool all_alive =
      std::all_of(s.ranks.begin(), s.ranks.end(), [&](uint32_t w) { return d.cluster->alive(w); });
  if (!all_alive) {
    if (call.op == Op::close_training) return dp_close(d, call, s);
    return dp_restore(d, call, s, request);
  }
  switch (call.op) {
    case Op::forward:
    case Op::forward_backward:
      return dp_forward_backward(d, call, s, request);
    case Op::save_weights:
    case Op::save_state:
      return remote_save(d, call, s, request);  // rank 0's weights (s.worker)
    case Op::load_state:
      return dp_load(d, call, s, request);
    case Op::close_training:
      return dp_close(d, call, s);
    default:
      return dp_all_ranks(d, call, s, request);  // optim_step
  }
}

}  // namespace training
}  // namespace spindle::service
