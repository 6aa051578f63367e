// A real spindled on the device under test (device_under_test.h: the CPU here, `--device cuda`
// in the "cuda." instance), f32, against the CPU engine in this process as the independent
// reference: the status op names the device and its memory; greedy samples of the base and of
// a trained adapter, requested concurrently so they share engine batches, equal the CPU engine's
// alone; a state saved by a session on the device resumes in a CPU daemon and takes the same
// next step.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "device_under_test.h"
#include "shared_fixtures.h"
#include "spindled_process.h"
#include "spindle/adapters/peft.h"
#include "spindle/engine/generator.h"
#include "spindle/engine/kv_cache.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/model.h"
#include "spindle/protocol/client.h"

namespace spindle::testing {
namespace {

namespace fs = std::filesystem;
using protocol::Client;
using protocol::ClientOptions;

fs::path stories() { return shared_dir() / "models" / "stories260K" / "stories260K.bin"; }

fs::path fresh_dir(const std::string& tag) {
  std::random_device rd;
  const fs::path d = fs::temp_directory_path() /
                     ("spindle_device_" + tag + "_" + std::to_string(::getpid()) + "_" +
                      std::to_string(rd()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

struct DeviceDaemon {
  DeviceDaemon(const fs::path& dir, const std::string& device)
      : process(binary_dir() / "app" / "spindled", dir,
                {"--model", stories().string(), "--device", device, "--dtype", "f32",
                 "--log-level", "warn", "--serving-slots", "4"},
                120) {}
  ClientOptions options() const {
    ClientOptions o;
    o.endpoint = process.endpoints().at(0);
    o.token = process.token();
    o.timeout_ms = 120000;
    return o;
  }
  SpindledProcess process;
};

class DeviceDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(stories())) GTEST_SKIP() << "fixture missing: " << stories();
    dir_ = fresh_dir("d");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

std::vector<protocol::Datum> batch(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<protocol::Datum> out;
  for (int d = 0; d < 3; ++d) {
    std::vector<int32_t> seq(12 + d * 5);
    for (auto& t : seq) t = int32_t(3 + rng() % 500);
    protocol::Datum datum;
    datum.model_input.assign(seq.begin(), seq.end() - 1);
    datum.target_tokens.assign(seq.begin() + 1, seq.end());
    out.push_back(datum);
  }
  return out;
}

double tolerance(double scale) {
  return (testing_cpu() ? 1e-6 : 1e-3) * std::max(1.0, std::abs(scale));
}

TEST_F(DeviceDaemonTest, StatusNamesTheDeviceAndItsMemory) {
  DeviceDaemon d(dir_, test_device());
  Client c(d.options());
  const auto st = c.status();
  EXPECT_EQ(st.device, testing_cpu() ? "cpu" : "cuda:0");
  EXPECT_EQ(st.dtype, "F32");
  EXPECT_FALSE(st.device_name.empty());
  const engine::ModelWeights w = engine::load_model(stories());
  EXPECT_EQ(st.base_bytes, w.bytes());
  EXPECT_GT(st.kv_bytes, 0u);
  EXPECT_GT(st.serving_pool_bytes, 0u);
  EXPECT_GT(st.training_pool_bytes, 0u);
  EXPECT_GT(st.device_total_bytes, st.device_free_bytes);
}

TEST_F(DeviceDaemonTest, ConcurrentGreedySamplesEqualTheCpuEngineAlone) {
  DeviceDaemon d(dir_, test_device());
  Client c(d.options());
  const std::string base = c.capabilities().bases.at(0).id;
  protocol::CreateTrainingRequest req;
  req.base_model = base;
  req.policy = "hetero";
  req.rank = 4;
  req.alpha = 8.0f;
  req.seed = 5;
  const auto session = c.create_training(req);
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 5e-2f;  // move the adapter far from the base in two steps
  for (uint32_t s = 0; s < 2; ++s) {
    c.forward_backward(session.session_id, batch(s));
    c.optim_step(session.session_id, adam);
  }
  const auto saved = c.save_weights(session.session_id, "hetero");

  // The reference: the CPU engine alone on the same base and the exported adapter.
  const engine::ModelWeights w = engine::load_model(stories());
  const engine::Model model(w);
  const auto exported = c.export_peft(saved.address);
  const fs::path peft = dir_ / "peft";
  fs::create_directories(peft);
  std::ofstream(peft / "adapter_config.json") << exported.adapter_config_json;
  std::ofstream(peft / "adapter_model.safetensors", std::ios::binary) << exported.adapter_model;
  const engine::LoraWeights adapter = adapters::load_peft(peft, w.config);
  auto alone = [&](const std::vector<int32_t>& prompt, bool adapted) {
    engine::LoraSlotPool pool(w.config, {.max_slots = 1, .max_rank = 4});
    if (adapted) pool.load(0, adapter);
    engine::KvCache kv(w.config, {.block_size = 16, .n_blocks = 0, .max_seqs = 2});
    engine::Generator gen(model, kv, &pool, nullptr);
    engine::GenerationRequest r;
    r.prompt = prompt;
    r.slot = adapted ? 0 : -1;
    r.params.max_tokens = 24;
    r.params.temperature = 0.0f;
    return gen.generate({r}).at(0).at(0).tokens;
  };

  protocol::SamplingParamsMsg greedy;
  greedy.max_tokens = 24;
  greedy.temperature = 0.0f;
  const std::vector<std::vector<int32_t>> prompts = {{1, 403, 407}, {1, 26, 77, 91, 8}, {1, 9}};
  // Six requests at once (three prompts × base / adapter), one client each: they overlap in
  // the daemon's engine steps, so base rows and adapter rows share forwards.
  std::vector<std::vector<int32_t>> got(6);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      Client ci(d.options());
      const std::string address = i % 2 == 0 ? base : saved.address;
      got[i] = ci.sample(address, prompts[i / 2], 1, greedy).sequences.at(0).tokens;
    });
  }
  for (auto& t : threads) t.join();
  int differs_from_base = 0;
  for (size_t i = 0; i < 6; ++i) {
    const auto want = alone(prompts[i / 2], i % 2 == 1);
    EXPECT_EQ(got[i], want) << "request " << i << (i % 2 ? " (adapter)" : " (base)");
    if (i % 2 == 1 && got[i] != got[i - 1]) ++differs_from_base;
  }
  EXPECT_GE(differs_from_base, 1) << "the trained adapter never changed a greedy completion";
}

TEST_F(DeviceDaemonTest, StateSavedOnTheDeviceResumesOnTheCpuWithTheSameNextStep) {
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 1e-2f;
  std::string address;
  double loss3 = 0, norm3 = 0;
  {
    DeviceDaemon d(dir_, test_device());
    Client c(d.options());
    protocol::CreateTrainingRequest req;
    req.base_model = c.capabilities().bases.at(0).id;
    req.policy = "portable";
    req.rank = 4;
    req.seed = 9;
    const auto session = c.create_training(req);
    for (uint32_t s = 0; s < 2; ++s) {
      c.forward_backward(session.session_id, batch(10 + s));
      c.optim_step(session.session_id, adam);
    }
    address = c.save_state(session.session_id, "after-2").address;
    loss3 = c.forward_backward(session.session_id, batch(20)).metric("loss:sum");
    const auto step = c.optim_step(session.session_id, adam);
    EXPECT_EQ(step.step, 3);
    norm3 = step.grad_norm;
    EXPECT_EQ(d.process.terminate(), 0);
  }
  DeviceDaemon cpu(dir_, "cpu");  // the same data dir: catalog and blobs
  Client c(cpu.options());
  const auto resumed = c.create_training_from_state(address);
  const double loss = c.forward_backward(resumed.session_id, batch(20)).metric("loss:sum");
  const auto step = c.optim_step(resumed.session_id, adam);
  EXPECT_EQ(step.step, 3) << "the optimizer state's step count did not travel";
  EXPECT_NEAR(loss, loss3, tolerance(loss3));
  EXPECT_NEAR(step.grad_norm, norm3, tolerance(norm3));
}

}  // namespace
}  // namespace spindle::testing
