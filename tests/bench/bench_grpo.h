#pragma once
// Internals of `spindle-bench grpo` shared by bench_grpo.cpp (driver, workers, report) and
// bench_grpo_base.cpp (the bases and what each one runs). bench_grpo.cpp's header comment
// describes the benchmark.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "spindle/engine/model_config.h"
#include "spindle/rl/config.h"
#include "spindle/rl/local_engine.h"

namespace spindle::bench::grpo {

namespace fs = std::filesystem;

enum class BaseKind {
  // stories260K (260K parameters, the shared fixture): per-step overhead dominates.
  stories260k,
  // Qwen3-0.6B's layer shape (dim 1024, MLP 3072, 16 q / 8 kv heads of 128, q/k norms) with
  // random weights, fewer layers and the byte tokenizer: a forward over a few rows reads
  // 60 MB of fp32 weights per layer, so it is bound by memory bandwidth, not arithmetic.
  qwen3_shape,
};

const char* base_kind_name(BaseKind kind);  // "stories260k" | "qwen3-shape"

struct GrpoBenchOptions {
  BaseKind base = BaseKind::qwen3_shape;
  fs::path model;  // the base a worker loads (stories260K's .bin, or the built HF directory)
  fs::path shared_dir;
  int64_t layers = 4;  // qwen3-shape only
  std::vector<int> policies = {1, 2, 4, 8};
  // Run shape and threads: defaults per base (apply_base_defaults), the same in both modes.
  int64_t steps = 0;
  int32_t group = 0;
  int32_t prompts = 0;
  int32_t max_tokens = 0;
  int threads = 0;  // OpenBLAS and OpenMP threads of every worker
  int repeats = 0;  // timed repetitions per worker; the median is reported
  int32_t rank = 8;
  uint64_t seed = 3;
  bool quick = false;
  std::string device = "cpu";  // LocalEngineOptions::device of every worker
};

// Fills every run-shape field still 0 with the base's default (and --quick's smaller ones).
void apply_base_defaults(GrpoBenchOptions& options);

// A Qwen3-shaped base with random weights written into a fresh directory under the system temp
// directory (config.json, model.safetensors, the byte tokenizer); removed by the destructor.
class TempQwen3Base {
 public:
  TempQwen3Base(int64_t layers, uint64_t seed);
  ~TempQwen3Base();
  TempQwen3Base(const TempQwen3Base&) = delete;
  TempQwen3Base& operator=(const TempQwen3Base&) = delete;

  const fs::path& dir() const { return dir_; }
  double weight_bytes() const { return weight_bytes_; }
  double build_s() const { return build_s_; }

 private:
  fs::path root_;  // the mkdtemp directory
  fs::path dir_;   // root_/qwen3-shape
  double weight_bytes_ = 0;
  double build_s_ = 0;
};

// The scheduler options of every worker, whatever its K and mode (max_policies: the bench's
// largest K).
rl::LocalEngineOptions engine_options(const GrpoBenchOptions& options, int max_policies);

// Policy k of a run on options.base: its own reward target, everything else shared.
rl::PolicyConfig bench_policy(const GrpoBenchOptions& options, int k);

// One line naming the reward of options.base (for the report header).
std::string reward_description(const GrpoBenchOptions& options);

}  // namespace spindle::bench::grpo
