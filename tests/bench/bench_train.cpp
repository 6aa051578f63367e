// spindle-bench train: LoRA training throughput on the Qwen3-0.6B-shaped random model, K
// policies in one forward/backward pass against the same K policies one after another (wall
// time and peak RSS, each mode in its own process so peaks do not mix), and full-parameter
// training throughput on a small demo-base-shaped model.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "bench.h"
#include "spindle/core/error.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/trainer.h"

namespace spindle::bench {
namespace {

constexpr engine::LoraTarget kSeven[] = {
    engine::LoraTarget::q,    engine::LoraTarget::k,  engine::LoraTarget::v,
    engine::LoraTarget::o,    engine::LoraTarget::gate, engine::LoraTarget::up,
    engine::LoraTarget::down};

// Peak resident set of this process so far (VmHWM), in bytes.
double peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
  }
  return 0;
}

std::vector<engine::TrainDatum> policy_data(int k, int64_t tokens, int64_t vocab) {
  std::mt19937 rng(uint32_t(1000 + k));
  engine::TrainDatum d;
  d.slot = k;
  for (int64_t t = 0; t < tokens; ++t) {
    d.input_tokens.push_back(int32_t(rng() % uint64_t(vocab)));
    d.target_tokens.push_back(int32_t(rng() % uint64_t(vocab)));
  }
  return {d};
}

}  // namespace

// Worker: one mode in this process. Prints "RESULT <seconds> <peak_rss_bytes> <tokens>".
void run_train_worker(const TrainBenchOptions& o, const std::string& mode) {
  const engine::ModelWeights w = fast_random_weights(qwen3_0_6b_config(o.quick ? 4 : 28), 7);
  const engine::Model model(w);
  engine::LoraSlotPool pool(w.config, {.max_slots = o.policies, .max_rank = 8,
                                       .targets = {std::begin(kSeven), std::end(kSeven)}});
  engine::LoraTrainer trainer(model, pool);
  for (int k = 0; k < o.policies; ++k) {
    trainer.attach(k, engine::init_lora(w.config, 8, 16.0f, kSeven, uint64_t(k)));
  }
  std::vector<std::vector<engine::TrainDatum>> data;
  for (int k = 0; k < o.policies; ++k) data.push_back(policy_data(k, o.tokens, w.config.vocab_size));
  std::vector<engine::TrainDatum> all;
  for (const auto& d : data) all.insert(all.end(), d.begin(), d.end());
  const engine::AdamParams adam{.learning_rate = 1e-4f};
  auto step = [&] {
    if (mode == "multi") {
      trainer.forward_backward(all, engine::LossFn::cross_entropy);
      for (int k = 0; k < o.policies; ++k) trainer.optim_step(k, adam);
    } else {
      for (int k = 0; k < o.policies; ++k) {
        trainer.forward_backward(data[size_t(k)], engine::LossFn::cross_entropy);
        trainer.optim_step(k, adam);
      }
    }
  };
  step();  // warm-up (allocations, first-touch)
  std::vector<double> times;
  for (int r = 0; r < o.repeats; ++r) {
    const auto t0 = Clock::now();
    step();
    times.push_back(seconds_since(t0));
  }
  std::printf("RESULT %.6f %.0f %lld\n", median(times), peak_rss_bytes(),
              static_cast<long long>(o.tokens * o.policies));
}

namespace {

struct ModeResult {
  double seconds = 0, peak = 0, tokens = 0;
};

ModeResult run_mode(const TrainBenchOptions& o, const std::string& mode) {
  std::string cmd = "\"" + o.self_exe + "\" train-worker --mode " + mode +
                    " --policies " + std::to_string(o.policies) + " --tokens " +
                    std::to_string(o.tokens) + " --repeats " + std::to_string(o.repeats) +
                    (o.quick ? " --quick" : "");
  FILE* p = ::popen(cmd.c_str(), "r");
  SPINDLE_CHECK(p != nullptr, io, "cannot start {}", cmd);
  char line[512];
  ModeResult r;
  bool found = false;
  while (std::fgets(line, sizeof line, p)) {
    if (std::sscanf(line, "RESULT %lf %lf %lf", &r.seconds, &r.peak, &r.tokens) == 3) found = true;
  }
  const int status = ::pclose(p);
  SPINDLE_CHECK(found && WIFEXITED(status) && WEXITSTATUS(status) == 0, internal,
                "train worker '{}' failed (status {})", mode, status);
  return r;
}

void full_parameter_bench(const TrainBenchOptions& o) {
  engine::ModelWeights w;
  std::string what;
  if (!o.demo_base.empty()) {
    w = engine::load_model(o.demo_base);
    what = o.demo_base.string();
  } else {
    engine::ModelConfig c;  // the shape `spindle make-base` builds by default
    c.arch = engine::Arch::llama;
    c.dim = 128;
    c.hidden_dim = 384;
    c.n_layers = 4;
    c.n_heads = 4;
    c.n_kv_heads = 4;
    c.head_dim = 32;
    c.vocab_size = 260;
    c.max_seq_len = 64;
    c.tie_embeddings = true;
    w = fast_random_weights(c, 3);
    what = "demo-base shape, random weights (pass --demo-base DIR for a real one)";
  }
  const engine::Model model(w);
  engine::FullTrainer trainer(model, w);
  std::vector<engine::TrainDatum> batch;
  for (int i = 0; i < 32; ++i) {
    auto d = policy_data(i, std::min<int64_t>(24, w.config.max_seq_len), w.config.vocab_size);
    batch.push_back(d[0]);
  }
  int64_t tokens = 0;
  for (const auto& d : batch) tokens += int64_t(d.input_tokens.size());
  std::vector<double> times;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = Clock::now();
    trainer.forward_backward(batch, engine::LossFn::cross_entropy);
    trainer.optim_step({.learning_rate = 1e-3f});
    if (r > 0) times.push_back(seconds_since(t0));
  }
  std::printf("== full-parameter training: %s ==\n", what.c_str());
  std::printf("full-parameter step, batch 32 x 24 tokens: %.1f tok/s (median of %zu)\n",
              double(tokens) / median(times), times.size());
}

}  // namespace

void run_train_bench(const TrainBenchOptions& o) {
  std::printf("== Qwen3-0.6B shape, random weights%s: LoRA rank 8 on q,k,v,o,gate,up,down ==\n",
              o.quick ? ", QUICK: 4 of 28 layers" : "");
  std::printf("%d policies x %lld tokens each; each mode runs in its own process\n", o.policies,
              static_cast<long long>(o.tokens));
  const ModeResult seq = run_mode(o, "sequential");
  const ModeResult multi = run_mode(o, "multi");
  std::printf("sequential (one policy per pass): %.2f s/step, %.1f tok/s fwd+bwd, peak RSS %.2f GB\n",
              seq.seconds, seq.tokens / seq.seconds, seq.peak / 1e9);
  std::printf("multi (all policies in one pass): %.2f s/step, %.1f tok/s fwd+bwd, peak RSS %.2f GB\n",
              multi.seconds, multi.tokens / multi.seconds, multi.peak / 1e9);
  std::printf("speedup_multi = %.2f\n", seq.seconds / multi.seconds);
  std::printf("peak_multi/peak_single = %.2f\n", multi.peak / seq.peak);
  full_parameter_bench(o);
}

}  // namespace spindle::bench
