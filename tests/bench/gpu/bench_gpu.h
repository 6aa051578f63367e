#pragma once
// spindle-bench-gpu: speed of the GPU engine on the Qwen3-0.6B-shaped random model in bf16 (or
// `--arch qwen3_moe`: decode on a Qwen3-30B-A3B shape cut to a few layers),
// printed as figures and ratios measured in the same run (STYLE.md 14). Links spindle::engine_cuda only
// (no ZeroMQ, no SQLite): it runs on a bare GPU machine. Times come from cudaEvents on the
// model's stream, after warm-up.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "spindle/engine/lora.h"
#include "spindle/engine_cuda/device_model.h"

namespace spindle::bench {

struct GpuBenchOptions {
  bool quick = false;  // fewer layers and steps (a smoke run, not the figures)
  int64_t n_layers = 28;
  // --arch qwen3_moe: the decode bench on a Qwen3-30B-A3B shape cut to n_layers (default 2)
  // instead of the Qwen3-0.6B shape, against its active-parameter bandwidth bound.
  bool moe = false;
};

// Elapsed time between two events recorded on one stream.
class GpuTimer {
 public:
  GpuTimer();
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;
  void start(cudaStream_t stream);
  // Records the stop event, waits for it and returns milliseconds since start().
  double stop_ms(cudaStream_t stream);

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Device memory bandwidth from cudaMemcpyAsync device-to-device copies of a `bytes` buffer, best
// of `passes` after one warm-up: (bytes read + bytes written) / time, bytes per second.
double gpu_copy_bandwidth(size_t bytes, int passes);

// The adapted projections of the benches (LoRA on every linear layer but lm_head).
const std::vector<engine::LoraTarget>& gpu_bench_targets();

// Decode at batch 1 (base only) against the bandwidth bound, at batch 64 with one adapter and
// with 64 distinct rank-8 adapters, and SGMV vs the base GEMM of the same layer.
void run_gpu_decode_bench(engine_cuda::DeviceModel& model, const GpuBenchOptions& options,
                          double bandwidth);

// Every op of a batch-1 decode step timed alone (graph replay) against its own bandwidth bound.
void run_gpu_op_breakdown(engine_cuda::DeviceModel& model, double bandwidth);

// LoRA training tokens/s (rank 16, sequences of 256 tokens).
void run_gpu_train_bench(engine_cuda::DeviceModel& model, const GpuBenchOptions& options);

// Every op of the LoRA training path timed alone at the training bench's shape (2048 rows, rank
// 16, one layer's weights) with its count per step, so the dominant op shows in one run.
void run_gpu_train_breakdown(engine_cuda::DeviceModel& model);

}  // namespace spindle::bench
