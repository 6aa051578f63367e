#pragma once
// Shared pieces of spindle-bench: timing, the random Qwen3-0.6B-shaped model, the read
// bandwidth probe and the engine benchmark entry point.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "spindle/engine/weights.h"

namespace spindle::bench {

using Clock = std::chrono::steady_clock;

// A short stories260K prompt ("Once upon a time"-like token ids) for the daemon benches.
inline const std::vector<int32_t> kStoriesPrompt = {1, 403, 407, 261, 378, 285, 262, 281};

// Inverse-CDF Zipf sampler over [0, n): rank 0 the most popular.
class Zipf {
 public:
  Zipf(int n, double s) : cdf_(size_t(n)) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) cdf_[size_t(i)] = sum += 1.0 / std::pow(double(i + 1), s);
    for (double& c : cdf_) c /= sum;
  }
  int operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    return std::min(int(cdf_.size()) - 1,
                    int(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin()));
  }

 private:
  std::vector<double> cdf_;
};

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Median of a non-empty sample (mean of the middle two for even sizes).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The q-quantile of a sample by nearest rank (0 for an empty sample).
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

// The fixtures folder: `flag` when given, else $SPINDLE_SHARED_DIR, else ../shared.
inline std::filesystem::path shared_dir_or_default(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("SPINDLE_SHARED_DIR"); env && *env) return env;
  return std::filesystem::path("..") / "shared";
}

// A "Vm...:" field of /proc/<pid>/status ("VmRSS", "VmHWM"), in bytes (0 when absent); pid 0 is
// this process.
inline double vm_status_bytes(const std::string& field, int pid = 0) {
  std::ifstream f(pid == 0 ? std::string("/proc/self/status")
                           : "/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) * 1024.0;
  }
  return 0;
}

// <build>/app/spindled, this program being <build>/tests/bench/spindle-bench.
inline std::filesystem::path default_spindled() {
  return std::filesystem::canonical("/proc/self/exe").parent_path().parent_path().parent_path() /
         "app" / "spindled";
}

// ---- bench_model.cpp --------------------------------------------------------------------

// Qwen3-0.6B's shape (hidden 1024, 16 heads / 8 KV heads of 128, intermediate 3072, vocab
// 151936, tied embeddings); `n_layers` is 28 for the real shape, fewer for --quick.
engine::ModelConfig qwen3_0_6b_config(int64_t n_layers);
// Qwen3-4B's shape (dim 2560, hidden 9728, 32 heads, 8 KV heads, head_dim 128, untied
// embeddings) with `n_layers` layers (36 in the real model).
engine::ModelConfig qwen3_4b_config(int64_t n_layers);
// Qwen3-30B-A3B's shape (dim 2048, 32 heads, 4 KV heads of 128, 128 experts of 768, top 8)
// with `n_layers` layers (48 in the real model).
engine::ModelConfig qwen3_30b_a3b_config(int64_t n_layers);
// DeepSeek-V3's attention and routing (MLA: 16 heads of 128 + 64, kv_lora_rank 512, a query
// latent; YaRN ×40; sigmoid router over 8 groups, top 4 groups, routed scaling 2.5, one shared
// expert; layer 0 dense) at Qwen3-30B-A3B's width and expert count, `n_layers` layers.
engine::ModelConfig deepseek_v3_moe_config(int64_t n_layers);

// Weights uniform in small ranges (projections ±1/√d_in, norms in [0.9, 1.1], embedding ±0.5) so
// activations stay finite and far from denormals. Filled with xorshift in parallel (OpenMP);
// the values depend on `seed` only, not on the thread count.
engine::ModelWeights fast_random_weights(const engine::ModelConfig& config, uint64_t seed);

// ---- bench_bandwidth.cpp ----------------------------------------------------------------

struct Bandwidth {
  double bytes_per_s = 0;  // best pass
  std::string isa;         // "avx512", "avx2" or "scalar"
  int threads = 0;
  size_t buffer_bytes = 0;
  int passes = 0;
};

// Streaming read bandwidth: `threads` OpenMP threads each sum their contiguous share of one
// `buffer_bytes` buffer with the widest vector loads the CPU has (several independent
// accumulators), best of `passes` timed passes after one untimed pass. No stores, no memcpy.
Bandwidth measure_read_bandwidth(size_t buffer_bytes, int threads, int passes);

// Bytes one batch-1 decode step reads: every layer's projections and norms, the final norm, the
// unembedding, the token's embedding row, and K and V of `context` cached tokens per layer.
double decode_bytes_per_token(const engine::ModelWeights& weights, double context);

// ---- bench_engine.cpp -------------------------------------------------------------------

struct EngineBenchOptions {
  std::filesystem::path model;       // empty: stories260K from shared_dir
  std::filesystem::path shared_dir;  // holds models/stories260K/stories260K.bin
  bool quick = false;
  int threads = 0;  // OpenBLAS and OpenMP threads (set by the caller)
  std::string arch;  // "qwen3_moe" / "deepseek_v3": that MoE shape cut to a few layers instead
};

void run_engine_bench(const EngineBenchOptions& options);

// ---- bench_train.cpp --------------------------------------------------------------------

struct TrainBenchOptions {
  std::string self_exe;   // this program, re-run per mode so peak RSS is per mode
  int policies = 8;       // K
  int64_t tokens = 64;    // tokens per policy per step
  int repeats = 3;
  bool quick = false;
  std::filesystem::path demo_base;  // HF dir from `spindle make-base` (optional)
};

void run_train_bench(const TrainBenchOptions& options);
// One mode ("multi" or "sequential") in this process; prints a RESULT line.
void run_train_worker(const TrainBenchOptions& options, const std::string& mode);

}  // namespace spindle::bench
