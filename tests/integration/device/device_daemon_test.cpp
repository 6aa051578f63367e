// A real spindled on the device under test (device_under_test.h: the CPU here, `--device cuda`
// in the "cuda." instance), f32, against the CPU engine in this process as the independent
// reference: the status op names the device and its memory; greedy samples of the base and of
// three different trained adapters (one of rank 2), requested concurrently so they share engine
// steps, equal the CPU engine's with that adapter alone; a training session's losses, grad
// norms and final weights over three steps equal engine::LoraTrainer's from the same initial
// adapter; a state saved by a session on the device resumes in a CPU daemon and takes the same
// next step; a routed-experts base serves adapters on its experts as the CPU engine does.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "../../unit/model/model_fixtures.h"
#include "device_under_test.h"
#include "shared_fixtures.h"
#include "spindled_process.h"
#include "spindle/adapters/peft.h"
#include "spindle/engine/generator.h"
#include "spindle/engine/kv_cache.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/model.h"
#include "spindle/engine/trainer.h"
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
  DeviceDaemon(const fs::path& dir, const std::string& device, const fs::path& model = stories())
      : process(binary_dir() / "app" / "spindled", dir,
                {"--model", model.string(), "--device", device, "--dtype", "f32",
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

// An adapter trained in the daemon for the sampling tests: a fresh session of rank `rank`
// (alpha 2·rank) initialised from `seed`, two AdamW steps at lr 5e-2 (far from the base) on
// batch(first_batch) and batch(first_batch + 1), its weights saved under policy `policy`.
struct AdapterRecipe {
  std::string policy;
  int32_t rank = 4;
  uint64_t seed = 0;
  uint32_t first_batch = 0;
};

// Trains `recipe` on `base` and returns the saved revision's address; the session is closed.
std::string train_adapter(Client& c, const std::string& base, const AdapterRecipe& recipe) {
  protocol::CreateTrainingRequest req;
  req.base_model = base;
  req.policy = recipe.policy;
  req.rank = recipe.rank;
  req.alpha = 2.0f * float(recipe.rank);
  req.seed = recipe.seed;
  const auto session = c.create_training(req);
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 5e-2f;
  for (uint32_t s = 0; s < 2; ++s) {
    c.forward_backward(session.session_id, batch(recipe.first_batch + s));
    c.optim_step(session.session_id, adam);
  }
  const std::string address = c.save_weights(session.session_id, recipe.policy).address;
  c.close_training(session.session_id);
  return address;
}

// The revision at `address` as the CPU engine reads it: export_peft's two files written under
// `dir` (created), then adapters::load_peft against `config`.
engine::LoraWeights exported_adapter(Client& c, const std::string& address, const fs::path& dir,
                                     const engine::ModelConfig& config) {
  const auto exported = c.export_peft(address);
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << exported.adapter_config_json;
  std::ofstream(dir / "adapter_model.safetensors", std::ios::binary) << exported.adapter_model;
  return adapters::load_peft(dir, config);
}

constexpr int32_t kGreedyTokens = 24;  // completion length, daemon and reference alike

const std::vector<std::vector<int32_t>>& greedy_prompts() {
  static const std::vector<std::vector<int32_t>> prompts = {
      {1, 403, 407}, {1, 26, 77, 91, 8}, {1, 9}};
  return prompts;
}

// The reference greedy completion of `prompt`: the CPU engine alone, `model` with `adapter` as
// the only one loaded (null = the base alone).
std::vector<int32_t> greedy_alone(const engine::Model& model, const engine::LoraWeights* adapter,
                                  const std::vector<int32_t>& prompt) {
  const engine::ModelConfig& config = model.config();
  engine::LoraSlotPool pool(config,
                            {.max_slots = 1, .max_rank = adapter ? int32_t(adapter->rank) : 1});
  if (adapter != nullptr) pool.load(0, *adapter);
  engine::KvCache kv(config, {.block_size = 16, .n_blocks = 0, .max_seqs = 2});
  engine::Generator gen(model, kv, &pool, nullptr);
  engine::GenerationRequest r;
  r.prompt = prompt;
  r.slot = adapter != nullptr ? 0 : -1;
  r.params.max_tokens = kGreedyTokens;
  r.params.temperature = 0.0f;
  return gen.generate({r}).at(0).at(0).tokens;
}

// One greedy sample request: `prompt` continued by `address` (a revision's, or the base's id).
struct GreedyCall {
  std::string address;
  std::vector<int32_t> prompt;
};

// Sends every call at once, one Client per thread, so that they overlap in the daemon's engine
// steps (rows of different adapters share forwards); returns the completions in call order. A
// failed call is a test failure and leaves its completion empty.
std::vector<std::vector<int32_t>> sample_concurrently(const DeviceDaemon& d,
                                                      const std::vector<GreedyCall>& calls) {
  protocol::SamplingParamsMsg greedy;
  greedy.max_tokens = kGreedyTokens;
  greedy.temperature = 0.0f;
  std::vector<std::vector<int32_t>> got(calls.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < calls.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        Client ci(d.options());
        got[i] = ci.sample(calls[i].address, calls[i].prompt, 1, greedy).sequences.at(0).tokens;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "sample " << i << " from " << calls[i].address << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

// Every (prompt, address) at once, so each engine step holds rows of several adapters and of
// the base: call p·n + k is prompt p by addresses[k] (addresses[0] the base, addresses[k] the
// revision of adapters[k − 1]); each completion must equal the CPU engine's with that adapter
// alone. And every pair of addresses from `first_pair` on differs on some prompt, so a slot
// mix-up (rows served by another adapter's weights) cannot pass.
void expect_greedy_like_cpu(const DeviceDaemon& d, const engine::Model& model,
                            const std::vector<std::string>& addresses,
                            const std::vector<engine::LoraWeights>& adapters,
                            const std::vector<std::vector<int32_t>>& prompts, size_t first_pair) {
  const size_t n = addresses.size();
  std::vector<GreedyCall> calls;
  for (const auto& prompt : prompts)
    for (const auto& address : addresses) calls.push_back({address, prompt});
  const auto got = sample_concurrently(d, calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    const size_t k = i % n;
    const auto want = greedy_alone(model, k == 0 ? nullptr : &adapters[k - 1], calls[i].prompt);
    EXPECT_EQ(got[i], want) << "prompt " << i / n << " by " << addresses[k];
  }
  for (size_t a = first_pair; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      bool differ = false;
      for (size_t p = 0; p < prompts.size(); ++p) differ |= got[p * n + a] != got[p * n + b];
      EXPECT_TRUE(differ) << addresses[a] << " and " << addresses[b]
                          << " give the same greedy completion of every prompt";
    }
  }
}

// `data` as engine::LoraTrainer takes it: every datum on `slot`, unweighted (1 per token).
std::vector<engine::TrainDatum> train_data(const std::vector<protocol::Datum>& data, int32_t slot) {
  std::vector<engine::TrainDatum> out;
  for (const protocol::Datum& d : data) {
    out.push_back({.input_tokens = d.model_input, .target_tokens = d.target_tokens, .slot = slot});
  }
  return out;
}

// Expects every adapted tensor of `got` to equal `want`'s: the same tensors, in order, each
// within tolerance() of its largest magnitude in `want`.
void expect_same_adapter(const engine::LoraWeights& got, const engine::LoraWeights& want) {
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.alpha, want.alpha);
  std::vector<std::pair<std::string, const Tensor*>> got_tensors;
  engine::for_each_lora_tensor(
      got, [&](const std::string& name, const Tensor& t) { got_tensors.emplace_back(name, &t); });
  size_t i = 0;
  engine::for_each_lora_tensor(want, [&](const std::string& name, const Tensor& t) {
    ASSERT_LT(i, got_tensors.size()) << name << " is missing";
    const auto& [got_name, g] = got_tensors[i++];
    ASSERT_EQ(got_name, name);
    ASSERT_EQ(g->shape(), t.shape()) << name;
    float scale = 0, diff = 0;
    for (int64_t j = 0; j < t.numel(); ++j) {
      scale = std::max(scale, std::abs(t.data()[j]));
      diff = std::max(diff, std::abs(g->data()[j] - t.data()[j]));
    }
    EXPECT_LE(diff, tolerance(scale)) << name;
  });
  EXPECT_EQ(i, got_tensors.size()) << "extra tensors";
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

TEST_F(DeviceDaemonTest, HeterogeneousBatchOfAdaptersEqualsEachAdapterAlone) {
  DeviceDaemon d(dir_, test_device());
  Client c(d.options());
  const std::string base = c.capabilities().bases.at(0).id;
  // Different inits, data and ranks; the three fit the daemon's four serving slots together.
  const std::vector<AdapterRecipe> recipes = {
      {.policy = "north", .rank = 4, .seed = 5, .first_batch = 0},
      {.policy = "east", .rank = 4, .seed = 6, .first_batch = 30},
      {.policy = "south", .rank = 2, .seed = 7, .first_batch = 60}};
  const engine::ModelWeights w = engine::load_model(stories());
  const engine::Model model(w);
  std::vector<std::string> addresses = {base};  // index 0 = the base, k = recipes[k − 1]
  std::vector<engine::LoraWeights> adapters;
  for (const AdapterRecipe& r : recipes) {
    addresses.push_back(train_adapter(c, base, r));
    adapters.push_back(exported_adapter(c, addresses.back(), dir_ / r.policy, w.config));
  }

  expect_greedy_like_cpu(d, model, addresses, adapters, greedy_prompts(), /*first_pair=*/1);
}

// A routed-experts base (a tiny random Qwen3-MoE written as an HF directory: layers 0 and 2
// routed, 8 experts, top 2) served by the daemon on the device under test: greedy samples of
// the base and of two imported adapters with LoRA on every expert's gate/up/down and on
// attention, requested concurrently (rows grouped by expert and slot inside one step), equal
// the CPU engine's with that adapter alone; a training session on it (LoRA on attention and
// every expert) lowers the loss of what it trains on.
TEST_F(DeviceDaemonTest, RoutedExpertsBaseServesAdaptersOnExpertsLikeTheCpuEngine) {
  engine::ModelConfig config = tiny_config(engine::Arch::qwen3_moe);
  config.head_dim = 16;  // the CUDA attention's multiple of 8
  config.name = "tiny-qwen3-moe";
  const engine::ModelWeights w = random_weights(config, 31);
  const fs::path base_dir = dir_ / "moe_base";
  engine::save_hf_dir(w, base_dir);
  DeviceDaemon d(dir_ / "daemon", test_device(), base_dir);
  Client c(d.options());
  const std::string base = c.capabilities().bases.at(0).id;
  using engine::LoraTarget;
  const LoraTarget targets[] = {LoraTarget::q, LoraTarget::o, LoraTarget::gate, LoraTarget::up,
                                LoraTarget::down};
  std::vector<engine::LoraWeights> adapters;
  std::vector<std::string> addresses = {base};
  for (int i = 0; i < 2; ++i) {
    adapters.push_back(engine::LoraWeights::random(w.config, 2 + 2 * i, 8.0f, targets, 40 + i,
                                                   0.3f, 0.3f));
    ASSERT_TRUE(adapters.back().has_experts());
    const fs::path peft = dir_ / ("peft" + std::to_string(i));
    adapters::save_peft(adapters.back(), peft, {.base_model_name_or_path = config.name});
    std::ifstream cfg(peft / "adapter_config.json"), model(peft / "adapter_model.safetensors",
                                                           std::ios::binary);
    const std::string cfg_text{std::istreambuf_iterator<char>(cfg), {}};
    const std::string model_bytes{std::istreambuf_iterator<char>(model), {}};
    addresses.push_back(
        c.import_peft("moe-" + std::to_string(i), base, cfg_text, model_bytes).policy.address);
  }
  const engine::Model cpu(w);
  expect_greedy_like_cpu(d, cpu, addresses, adapters, {{1, 40, 41}, {1, 26, 77, 91, 8}, {1, 9}},
                         /*first_pair=*/0);

  protocol::CreateTrainingRequest req;
  req.base_model = base;
  req.policy = "moe-train";
  req.rank = 2;
  req.alpha = 4.0f;
  protocol::Datum datum;
  datum.model_input = {1, 40, 41, 42, 43};
  datum.target_tokens = {40, 41, 42, 43, 44};
  const auto session = c.create_training(req);
  const double first = c.forward_backward(session.session_id, {datum}).metric("loss:sum");
  EXPECT_TRUE(std::isfinite(first) && first > 0) << first;
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 5e-2f;
  c.optim_step(session.session_id, adam);
  for (int step = 0; step < 3; ++step) {
    c.forward_backward(session.session_id, {datum});
    c.optim_step(session.session_id, adam);
  }
  const double later = c.forward(session.session_id, {datum}).metric("loss:sum");
  EXPECT_LT(later, first) << "four AdamW steps on one datum did not lower its loss";
}

TEST_F(DeviceDaemonTest, TrainingSessionEqualsTheCpuEngine) {
  DeviceDaemon d(dir_, test_device());
  Client c(d.options());
  protocol::CreateTrainingRequest req;
  req.base_model = c.capabilities().bases.at(0).id;
  req.policy = "reference";
  req.rank = 4;
  req.alpha = 8.0f;
  req.seed = 11;
  const auto session = c.create_training(req);
  // Every field off its default, so that one the daemon dropped or swapped would show; the clip
  // lies between the steps' grad norms (about 450, 430, 360), so both branches are compared.
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 1e-2f;
  adam.beta1 = 0.8f;
  adam.beta2 = 0.99f;
  adam.eps = 1e-4f;  // above rounding (a near-zero eps makes tiny gradients step lr·sign(g))
  adam.weight_decay = 0.1f;
  adam.grad_clip_norm = 400.0f;
  const engine::AdamParams reference_adam{.learning_rate = adam.learning_rate,
                                          .beta1 = adam.beta1,
                                          .beta2 = adam.beta2,
                                          .eps = adam.eps,
                                          .weight_decay = adam.weight_decay,
                                          .grad_clip_norm = adam.grad_clip_norm};

  // The reference: engine::LoraTrainer on the CPU, from the session's initial adapter (step 0).
  const engine::ModelWeights w = engine::load_model(stories());
  const engine::Model model(w);
  const std::string initial = c.save_weights(session.session_id, "step-0").address;
  engine::LoraSlotPool pool(w.config, {.max_slots = 1, .max_rank = req.rank});
  engine::LoraTrainer trainer(model, pool);
  trainer.attach(0, exported_adapter(c, initial, dir_ / "step-0", w.config));

  for (uint32_t s = 0; s < 3; ++s) {
    const auto data = batch(40 + s);
    const double loss = c.forward_backward(session.session_id, data).metric("loss:sum");
    const double want_loss =
        trainer.forward_backward(train_data(data, 0), engine::LossFn::cross_entropy).metrics.loss;
    EXPECT_NEAR(loss, want_loss, tolerance(want_loss)) << "step " << s + 1;
    const auto step = c.optim_step(session.session_id, adam);
    const auto want_step = trainer.optim_step(0, reference_adam);
    EXPECT_EQ(step.step, want_step.step);
    EXPECT_NEAR(step.grad_norm, want_step.grad_norm, tolerance(want_step.grad_norm))
        << "step " << s + 1;
    EXPECT_EQ(step.clipped, want_step.clipped) << "step " << s + 1;
  }
  const std::string trained = c.save_weights(session.session_id, "step-3").address;
  expect_same_adapter(exported_adapter(c, trained, dir_ / "step-3", w.config), trainer.weights(0));
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
