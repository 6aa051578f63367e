// A coordinator and two worker spindled processes on stories260K (issue 17), from C++ so that
// the tsan preset runs the cluster's threads (front, catalog, run and reward threads posting
// forwards; replies relayed and decoded) under ThreadSanitizer: a GRPO run spread over the
// workers survives a SIGKILL of one of them, base sampling is forwarded, a save_weights is
// served from the worker's slot at once, and every process stops cleanly (exit 0: TSan's
// halt_on_error would make it nonzero).

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <map>
#include <memory>

#include "daemon.h"
#include "keyword_policy.h"
#include "spindle/catalog/catalog.h"

namespace spindle::testing {
namespace {

using namespace protocol;
using json = nlohmann::json;

std::map<std::string, ClusterWorkerMsg> workers_of(RawClient& c) {
  std::map<std::string, ClusterWorkerMsg> out;
  for (const auto& w : c.ok<ClusterStatusReply>(Op::cluster_status, Empty{}).workers) {
    out[w.name] = w;
  }
  return out;
}

template <class Pred>
bool eventually(Pred pred, int timeout_s = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Workers <name>0 and <name>1 joining the coordinator of data dir `coord_dir` over its IPC
// cluster endpoint.
std::vector<std::unique_ptr<Daemon>> start_workers(const fs::path& coord_dir,
                                                   const std::string& name,
                                                   const std::vector<std::string>& extra = {}) {
  const std::string join = "ipc://" + (coord_dir / "spindled-cluster.sock").string();
  std::vector<std::unique_ptr<Daemon>> workers;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> args = {
        "--role",        "worker", "--coordinator", join, "--worker-name", name + std::to_string(i),
        "--heartbeat-s", "0.2"};
    args.insert(args.end(), extra.begin(), extra.end());
    workers.push_back(
        std::make_unique<Daemon>(fresh_dir("cluster_" + name + std::to_string(i)), args));
  }
  return workers;
}

bool both_alive(RawClient& client, const std::string& name) {
  const auto w = workers_of(client);
  return w.size() == 2 && w.at(name + "0").alive && w.at(name + "1").alive;
}

TEST(ServiceCluster, GrpoRunSpreadsOverWorkersAndSurvivesAKill) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("cluster_coord");
  Daemon coord(dir, {"--role", "coordinator", "--worker-timeout-s", "3"});
  const auto workers = start_workers(dir, "w");
  RawClient client(coord.ipc(), coord.token());
  ASSERT_TRUE(eventually([&] { return both_alive(client, "w"); })) << coord.log();

  // Base sampling is forwarded to a worker.
  Frames frames;
  ComputeLogprobsRequest lp;
  lp.address = "stories260K";
  const std::vector<int32_t> tokens = {1, 400, 401, 402};
  lp.prompt = add_tensor(frames, std::span<const int32_t>(tokens));
  const auto logprobs = client.ok<ComputeLogprobsReply>(Op::compute_logprobs, lp, frames);
  EXPECT_EQ(read_float32(logprobs.logprobs, client.last_frames, "logprobs").size(), tokens.size());
  uint64_t forwarded = 0;
  for (const auto& [name, w] : workers_of(client)) forwarded += w.forwarded;
  EXPECT_GE(forwarded, 1u);

  json config = {{"seed", 3},          {"steps", 40},      {"group_size", 4},
                 {"prompts_per_step", 2}, {"max_tokens", 8}, {"eval_every", 0},
                 {"save_every", 2},    {"eval_prompts", 0}};
  config["policies"] = {keyword_policy("c-cat", "cat"), keyword_policy("c-dog", "dog"),
                        keyword_policy("c-sun", "sun")};
  const auto started =
      client.ok<RunStartReply>(Op::run_start, RunStartRequest{config.dump(), false});
  auto status = [&] {
    return client.ok<RunStatusReply>(Op::run_status, RunStatusRequest{started.run_id, 0});
  };
  // The run's three sessions live on the workers, none on the coordinator.
  ASSERT_TRUE(eventually([&] {
    uint32_t n = 0;
    for (const auto& [name, w] : workers_of(client)) n += w.sessions;
    return n == 3;
  })) << status().run.status << ": " << status().run.error << "\n" << coord.log();
  ASSERT_TRUE(eventually([&] { return status().run.step >= 3; })) << coord.log();

  // SIGKILL the worker holding the most sessions; the run fails over to the other.
  const auto before = workers_of(client);
  const int victim = before.at("w0").sessions >= before.at("w1").sessions ? 0 : 1;
  workers[size_t(victim)]->kill_now();
  RunStatusReply fin;
  ASSERT_TRUE(eventually([&] {
    fin = status();
    return fin.run.status == "done" || fin.run.status == "failed";
  }, 300)) << coord.log();
  ASSERT_EQ(fin.run.status, "done") << fin.run.error << "\n" << coord.log();
  EXPECT_EQ(fin.run.step, 40);
  std::map<std::string, std::set<int64_t>> steps;
  for (const auto& m : fin.metrics) steps[m.policy].insert(m.step);
  for (const char* p : {"c-cat", "c-dog", "c-sun"}) {
    EXPECT_EQ(steps[p].size(), 41u) << p;  // 0..40, the re-run steps replaced
  }
  EXPECT_NE(coord.log().find("failed over"), std::string::npos) << coord.log();

  EXPECT_EQ(workers[size_t(1 - victim)]->terminate(), 0) << workers[size_t(1 - victim)]->log();
  EXPECT_EQ(coord.terminate(), 0) << coord.log();
  {
    catalog::Catalog cat(dir);
    for (const char* p : {"c-cat", "c-dog", "c-sun"}) {
      EXPECT_EQ(cat.get("local", catalog::Address{"local", p, ""}).revision.step, 40) << p;
    }
  }
}

// A data-parallel session on both workers (Gloo sums between the two worker processes, their
// rendezvous through the coordinator's store): the same losses and grad norms as a one-worker
// session on the whole batch, pipelined requests, and every process stops cleanly.
TEST(ServiceCluster, DataParallelSessionEqualsOneWorkerAndStopsCleanly) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("cluster_dp_coord");
  Daemon coord(dir, {"--role", "coordinator", "--worker-timeout-s", "3"});
  const auto workers = start_workers(dir, "dp", {"--collective-host", "127.0.0.1"});
  RawClient client(coord.ipc(), coord.token());
  ASSERT_TRUE(eventually([&] { return both_alive(client, "dp"); })) << coord.log();

  auto open = [&](const std::string& policy, uint32_t ranks) {
    CreateTrainingRequest create;
    create.base_model = "stories260K";
    create.policy = policy;
    create.rank = 4;
    create.alpha = 8;
    create.seed = 3;
    create.data_parallel = ranks;
    return client.ok<TrainingSessionReply>(Op::create_training, create);
  };
  const auto one = open("dp-one", 1);
  const auto two = open("dp-two", 2);
  EXPECT_EQ(one.data_parallel, 1u);
  EXPECT_EQ(two.data_parallel, 2u);
  const std::vector<std::vector<int32_t>> data = {
      {1, 400, 401, 402, 403, 404}, {1, 410, 411}, {1, 420, 421, 422, 423}, {1, 430, 431, 432}};
  AdamParamsMsg adam;
  adam.learning_rate = 1e-2f;
  for (int step = 0; step < 3; ++step) {
    Frames fa, fb;
    const ForwardBackwardRequest ra = fb_request(one.session_id, data, fa);
    const ForwardBackwardRequest rb = fb_request(two.session_id, data, fb);
    const auto a = client.ok<ForwardBackwardReply>(Op::forward_backward, ra, fa);
    const auto b = client.ok<ForwardBackwardReply>(Op::forward_backward, rb, fb);
    ASSERT_EQ(b.loss_fn_outputs.size(), data.size());
    EXPECT_EQ(metric(b, "n_tokens:sum"), metric(a, "n_tokens:sum"));
    EXPECT_NEAR(metric(b, "loss:sum"), metric(a, "loss:sum"),
                1e-4 * std::abs(metric(a, "loss:sum")));
    const auto sa =
        client.ok<OptimStepReply>(Op::optim_step, OptimStepRequest{one.session_id, adam});
    const auto sb =
        client.ok<OptimStepReply>(Op::optim_step, OptimStepRequest{two.session_id, adam});
    EXPECT_EQ(sb.step, sa.step);
    EXPECT_NEAR(sb.grad_norm, sa.grad_norm, 1e-4 * sa.grad_norm);
  }
  // One session for dp-one, a rank of dp-two on each worker (as their next heartbeats say).
  EXPECT_TRUE(eventually([&] {
    uint32_t sessions = 0;
    for (const auto& [name, w] : workers_of(client)) sessions += w.sessions;
    return sessions == 3;
  })) << coord.log();
  client.ok<Empty>(Op::close_training, SessionRequest{two.session_id});
  client.ok<Empty>(Op::close_training, SessionRequest{one.session_id});
  for (auto& w : workers) EXPECT_EQ(w->terminate(), 0) << w->log();
  EXPECT_EQ(coord.terminate(), 0) << coord.log();
}

// A worker has no client endpoint; its residency counters come from its metrics endpoint
// (--metrics-port -1: the URL is in its log).
const std::string kDeviceHits = "spindle_cache_hit_ratio{tier=\"device\"}";
const std::string kColdParks = "spindle_adapter_parks_total{cause=\"cold\"}";
const std::string kSlotsUsed = "spindle_device_slots{state=\"used\"}";
struct WorkerMetrics {
  static std::map<std::string, double> scrape(const Daemon& worker) {
    std::map<std::string, double> out;
    const std::string log = worker.log();
    const size_t at = log.find("metrics on http://");
    if (at == std::string::npos) return out;
    const size_t host = at + std::strlen("metrics on http://");
    const size_t colon = log.find(':', host);
    const int port = std::atoi(log.c_str() + colon + 1);
    httplib::Client http(log.substr(host, colon - host), port);
    http.set_read_timeout(30, 0);
    const httplib::Result r = http.Get("/metrics");
    if (!r || r->status != 200) return out;
    std::istringstream in(r->body);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.rfind(' ');
      out[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
    }
    return out;
  }
};

// The train -> serve handoff across processes: save_weights on a session that lives on a
// worker puts the snapshot into a serving slot there, and the coordinator renames that slot to
// the committed blob before it replies, so the first sample of the new revision (forwarded to
// the policy's worker, where its session is) is a device hit with no load. A save_state takes
// no slot: its first sample loads.
TEST(ServiceCluster, SaveWeightsIsServedFromTheWorkersSlotAtOnce) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("cluster_publish_coord");
  Daemon coord(dir, {"--role", "coordinator", "--worker-timeout-s", "3"});
  const auto workers = start_workers(dir, "pub", {"--metrics-port", "-1"});
  RawClient client(coord.ipc(), coord.token());
  ASSERT_TRUE(eventually([&] { return both_alive(client, "pub"); })) << coord.log();

  CreateTrainingRequest create;
  create.base_model = "stories260K";
  create.policy = "handoff";
  create.rank = 4;
  create.alpha = 8;
  create.seed = 5;
  const auto session = client.ok<TrainingSessionReply>(Op::create_training, create);
  Frames f;
  const ForwardBackwardRequest fb = fb_request(session.session_id, {{1, 400, 401, 402, 403}}, f);
  client.ok<ForwardBackwardReply>(Op::forward_backward, fb, f);
  AdamParamsMsg adam;
  adam.learning_rate = 1e-2f;
  client.ok<OptimStepReply>(Op::optim_step, OptimStepRequest{session.session_id, adam});
  // Which worker holds the session (as its heartbeat says).
  std::string holder;
  ASSERT_TRUE(eventually([&] {
    for (const auto& [name, w] : workers_of(client)) {
      if (w.sessions == 1) holder = name;
    }
    return !holder.empty();
  })) << coord.log();
  Daemon& worker = *workers[holder == "pub0" ? 0 : 1];
  const auto before = WorkerMetrics::scrape(worker);
  ASSERT_FALSE(before.empty()) << worker.log();

  const auto saved = client.ok<SaveReply>(Op::save_weights, SaveRequest{session.session_id, "", ""});
  Frames sf;
  const SampleRequest first = sample_request(saved.address, {1, 400, 30}, sf, 4, 0.0f, 1);
  const auto sampled = client.ok<SampleReply>(Op::sample, first, sf);
  ASSERT_EQ(sampled.sequences.size(), 1u);
  auto after = WorkerMetrics::scrape(worker);
  EXPECT_EQ(after.at(kColdParks), before.at(kColdParks)) << "the saved revision waited for a load";
  EXPECT_EQ(after.at(kDeviceHits), 1.0) << "its first request found it in a slot: " << worker.log();
  EXPECT_EQ(after.at(kSlotsUsed), before.at(kSlotsUsed) + 1) << "one slot, under the blob's name";

  // A step later, a checkpoint: no slot taken, its first sample is a cold load.
  Frames f2;
  const ForwardBackwardRequest fb2 = fb_request(session.session_id, {{1, 400, 401, 402, 403}}, f2);
  client.ok<ForwardBackwardReply>(Op::forward_backward, fb2, f2);
  client.ok<OptimStepReply>(Op::optim_step, OptimStepRequest{session.session_id, adam});
  const auto state = client.ok<SaveReply>(Op::save_state, SaveRequest{session.session_id, "", ""});
  Frames tf;
  const SampleRequest second = sample_request(state.address, {1, 400, 30}, tf, 4, 0.0f, 1);
  client.ok<SampleReply>(Op::sample, second, tf);
  after = WorkerMetrics::scrape(worker);
  EXPECT_LT(after.at(kDeviceHits), 1.0) << "save_state's revision was not published";
  EXPECT_EQ(after.at(kColdParks), before.at(kColdParks) + 1) << "it was loaded from its blob";

  client.ok<Empty>(Op::close_training, SessionRequest{session.session_id});
  for (auto& w : workers) EXPECT_EQ(w->terminate(), 0) << w->log();
  EXPECT_EQ(coord.terminate(), 0) << coord.log();
}

}  // namespace
}  // namespace spindle::testing
