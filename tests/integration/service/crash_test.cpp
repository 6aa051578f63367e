// Crash: SIGKILL spindled at random moments while a client trains through it; after each restart
// every acknowledged save_state revision is in the catalog with its exact weights, and training
// resumes from the last one (same step, same loss on fixed data).

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "daemon.h"
#include "spindle/protocol/client.h"

namespace spindle::testing {
namespace {

using protocol::Client;
using protocol::ClientError;
using protocol::ClientOptions;

struct Ack {
  std::string address;
  int64_t step = 0;
  double loss = std::nan("");  // forward loss on the fixed data right after the save (if seen)
};

std::vector<protocol::Datum> fixed_data() {
  const std::vector<std::vector<int32_t>> seqs = {{1, 403, 407, 261, 378, 285, 262, 281, 300},
                                                  {1, 365, 290, 261, 401, 330, 280, 310, 270}};
  std::vector<protocol::Datum> data;
  for (const auto& s : seqs) {
    protocol::Datum d;
    d.model_input.assign(s.begin(), s.end() - 1);
    d.target_tokens.assign(s.begin() + 1, s.end());
    data.push_back(std::move(d));
  }
  return data;
}

ClientOptions options_for(const Daemon& d) {
  ClientOptions o;
  o.endpoint = d.ipc();
  o.token = d.token();
  o.timeout_ms = 3000;  // a killed daemon shows up as a timeout
  return o;
}

TEST(ServiceCrash, SigkillDuringTrainingLosesNothingAcknowledged) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("crash");
  const auto data = fixed_data();
  std::mt19937 rng(20261129);
  std::vector<Ack> acked;
  int kills = 0;

  for (int cycle = 0; cycle < 4; ++cycle) {
    Daemon daemon(dir, {});
    Client client(options_for(daemon));
    protocol::TrainingSessionReply session;
    if (acked.empty()) {
      protocol::CreateTrainingRequest req;
      req.base_model = "stories260K";
      req.policy = "crash";
      req.rank = 4;
      req.alpha = 8.0f;
      req.seed = 1;
      session = client.create_training(req);
    } else {
      // Resume from the last acknowledged state, and check it is exactly what was saved.
      const Ack& last = acked.back();
      session = client.create_training_from_state(last.address);
      EXPECT_EQ(session.step, last.step) << last.address;
      if (!std::isnan(last.loss)) {
        const double loss = client.forward(session.session_id, data).metric("loss:sum");
        EXPECT_NEAR(loss, last.loss, 1e-5 * std::abs(last.loss)) << last.address;
      }
    }
    const int delay_ms = std::uniform_int_distribution<int>(150, 700)(rng);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      daemon.kill_now();
    });
    protocol::AdamParamsMsg adam;
    adam.learning_rate = 1e-2f;
    try {
      for (;;) {
        client.forward_backward(session.session_id, data);
        const int64_t step = client.optim_step(session.session_id, adam).step;
        const auto saved = client.save_state(session.session_id, "crash-test");
        acked.push_back(Ack{saved.address, step});
        acked.back().loss = client.forward(session.session_id, data).metric("loss:sum");
      }
    } catch (const ClientError& e) {
      EXPECT_TRUE(e.code() == "timeout" || e.code() == "transport") << e.what();
    }
    killer.join();
    ++kills;
  }
  ASSERT_GE(acked.size(), 2u) << "the daemon was killed before anything was saved";

  // Restart once more: every acknowledged revision is there, intact (export reads and verifies
  // the blob's checksum), steps increase, and the catalog file passes its checks.
  Daemon daemon(dir, {});
  Client client(options_for(daemon));
  int64_t prev_step = 0;
  for (const Ack& a : acked) {
    const auto shown = client.catalog_show(a.address);
    EXPECT_TRUE(shown.revision.has_state) << a.address;
    EXPECT_EQ(shown.revision.step, a.step) << a.address;
    EXPECT_GT(shown.revision.step, prev_step) << a.address;
    prev_step = shown.revision.step;
    EXPECT_FALSE(client.export_peft(a.address).adapter_model.empty()) << a.address;
  }
  EXPECT_EQ(daemon.terminate(), 0);
  const RunResult check = run_spindle({"catalog", "check", "--data-dir", dir.string()});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  std::printf("crash test: %d kills, %zu acknowledged revisions\n", kills, acked.size());
}

}  // namespace
}  // namespace spindle::testing
