// Decode speed on the GPU: batch 1 against the bandwidth bound, batch 64 with one adapter and
// with 64 distinct rank-8 adapters, each eager and replaying CUDA graphs (the goal ratios use
// the graph figures), and the SGMV pair against the base GEMM of one layer.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "bench_gpu.h"
#include "spindle/engine_cuda/device_kv_cache.h"
#include "spindle/engine_cuda/device_lora_pool.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/cuda/lora.h"

namespace spindle::bench {

namespace cuda = kernels::cuda;
using engine::LoraTarget;

GpuTimer::GpuTimer() {
  cuda::check(cudaEventCreate(&start_), "cudaEventCreate");
  cuda::check(cudaEventCreate(&stop_), "cudaEventCreate");
}

GpuTimer::~GpuTimer() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

void GpuTimer::start(cudaStream_t stream) {
  cuda::check(cudaEventRecord(start_, stream), "cudaEventRecord");
}

double GpuTimer::stop_ms(cudaStream_t stream) {
  cuda::check(cudaEventRecord(stop_, stream), "cudaEventRecord");
  cuda::check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
  float ms = 0.0f;
  cuda::check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
  return double(ms);
}

double gpu_copy_bandwidth(size_t bytes, int passes) {
  cuda::DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  cuda::check(cudaMemset(src.data(), 1, bytes), "cudaMemset");
  cuda::Stream stream;
  GpuTimer timer;
  double best = 0.0;
  for (int p = 0; p <= passes; ++p) {
    timer.start(stream.get());
    cuda::check(
        cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()),
        "cudaMemcpyAsync D2D");
    const double s = timer.stop_ms(stream.get()) / 1e3;
    if (p > 0) best = std::max(best, 2.0 * double(bytes) / s);  // pass 0 warms up
  }
  return best;
}

const std::vector<LoraTarget>& gpu_bench_targets() {
  static const std::vector<LoraTarget> targets = {LoraTarget::q,   LoraTarget::k,    LoraTarget::v,
                                                  LoraTarget::o,   LoraTarget::gate, LoraTarget::up,
                                                  LoraTarget::down};
  return targets;
}

namespace {

struct DecodeRun {
  double tokens_per_s = 0;
  double ms_per_step = 0;
  double mean_context = 0;
};

// Prefills one `prompt`-token sequence per entry of `slots` (untimed), then decodes `warmup`
// untimed and `steps` timed steps of one token per sequence. Every step waits for its logits,
// as a sampler would. With `graph`, decode steps replay CUDA graphs (captured during warm-up).
DecodeRun time_decode(engine_cuda::DeviceModel& model, engine_cuda::DeviceKvCache& cache,
                      const engine_cuda::DeviceLoraPool* pool, const std::vector<int32_t>& slots,
                      int64_t prompt, int warmup, int steps, bool graph) {
  const engine::ModelConfig& c = model.config();
  const size_t n = slots.size();
  std::vector<engine_cuda::SeqId> seqs;
  std::vector<std::vector<int32_t>> prompts(n), next(n);
  std::vector<engine::BatchSequence> batch;
  for (size_t i = 0; i < n; ++i) {
    seqs.push_back(cache.create());
    for (int64_t t = 0; t < prompt; ++t)
      prompts[i].push_back(int32_t((int64_t(i) * 7919 + t * 104729) % c.vocab_size));
    batch.push_back({seqs[i], prompts[i], slots[i]});
  }
  engine_cuda::DeviceForwardState st;
  const engine_cuda::DeviceForwardOptions opts{.logits = engine::LogitsFor::last_token,
                                       .copy_logits = false,
                                       .use_graph = graph};
  model.forward(batch, cache, pool, st, opts);
  model.synchronize();
  GpuTimer timer;
  DecodeRun r;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) timer.start(model.stream());
    batch.clear();
    for (size_t i = 0; i < n; ++i) {
      next[i] = {int32_t((int64_t(i) * 31 + step * 17 + 5) % c.vocab_size)};
      batch.push_back({seqs[i], next[i], slots[i]});
    }
    model.forward(batch, cache, pool, st, opts);
    model.synchronize();
  }
  const double ms = timer.stop_ms(model.stream());
  for (engine_cuda::SeqId s : seqs) cache.release(s);
  r.ms_per_step = ms / steps;
  r.tokens_per_s = double(n) * steps / (ms / 1e3);
  r.mean_context = double(prompt + warmup) + 0.5 * steps;
  return r;
}

// Bytes a batch-1 decode step reads: every weight once (bf16 projections and unembedding, fp32
// norms; a tied unembedding is the embedding table, whose one gathered row is negligible) and
// K and V of `context` cached tokens per layer. Routed experts count top_k of n_experts (the
// active parameters): one token reads only its chosen experts.
double decode_bytes(const engine_cuda::DeviceModel& model, double context) {
  const engine::ModelConfig& c = model.config();
  double weights = double(model.weights().bytes());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const engine_cuda::DeviceLayerWeights& L = model.weights().layer(l);
    const double experts =
        double(L.expert_gate.bytes() + L.expert_up.bytes() + L.expert_down.bytes());
    if (experts > 0) weights -= experts * (1.0 - double(c.moe.top_k) / double(c.moe.n_experts));
  }
  return weights + double(c.n_layers) * context * 2.0 * double(c.kv_dim()) *
                       double(engine_cuda::precision_bytes(model.precision()));
}

// SGMV shrink + expand over 64 one-row segments (64 distinct slots) vs the base GEMM of the
// same projection (layer 0 q_proj) at 64 rows, each timed over `reps` back-to-back launches.
void time_sgmv(engine_cuda::DeviceModel& model, const engine_cuda::DeviceLoraPool& pool, int reps) {
  const engine::ModelConfig& c = model.config();
  const int64_t rows = 64, d_in = c.dim, d_out = c.q_dim();
  const cudaStream_t s = model.stream();
  std::vector<float> xh(size_t(rows * d_in));
  for (size_t i = 0; i < xh.size(); ++i) xh[i] = float(int(i * 2654435761u % 2001) - 1000) / 1e3f;
  engine_cuda::DeviceTensor x(rows, d_in, engine_cuda::Precision::bf16), y(rows, d_out, engine_cuda::Precision::bf16);
  x.upload(xh.data(), int64_t(xh.size()), s);
  engine_cuda::DeviceTensor h(rows, pool.max_rank(), engine_cuda::Precision::fp32);
  std::vector<kernels::LoraSegment> segs;
  for (int64_t r = 0; r < rows; ++r) segs.push_back({r, r + 1, int32_t(r % pool.max_slots())});
  cuda::DeviceBuffer<kernels::LoraSegment> d_segs(segs.size());
  d_segs.upload(segs);
  const cuda::DeviceSegments dsegs{d_segs.data(), int32_t(segs.size()), rows};
  const auto view = pool.view(0, LoraTarget::q);
  const cuda::bf16* W = model.weights().layer(0).wq.data<cuda::bf16>();
  auto base = [&] {
    cuda::linear<cuda::bf16>(model.blas(), x.data<cuda::bf16>(), d_in, rows, d_in, W, d_out,
                             y.data<cuda::bf16>(), d_out, 0.0f, s);
  };
  auto sgmv = [&] {
    cuda::lora_shrink<cuda::bf16>(x.data<cuda::bf16>(), d_in, *view, dsegs, h.data<float>(), s);
    cuda::lora_expand<cuda::bf16>(h.data<float>(), *view, dsegs, y.data<cuda::bf16>(), d_out,
                                  /*col_offset=*/0, s);
  };
  GpuTimer timer;
  double ms[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    for (int i = 0; i < 10; ++i) which == 0 ? base() : sgmv();
    timer.start(s);
    for (int i = 0; i < reps; ++i) which == 0 ? base() : sgmv();
    ms[which] = timer.stop_ms(s) / reps;
  }
  std::printf("base_gemm (q_proj %lldx%lld, 64 rows) = %.2f us\n", (long long)d_out,
              (long long)d_in, ms[0] * 1e3);
  std::printf("sgmv shrink+expand (64 rows, 64 slots, rank %d) = %.2f us\n", pool.max_rank(),
              ms[1] * 1e3);
  std::printf("sgmv/base_gemm = %.3f\n", ms[1] / ms[0]);
}

}  // namespace

void run_gpu_decode_bench(engine_cuda::DeviceModel& model, const GpuBenchOptions& o, double bandwidth) {
  const engine::ModelConfig& c = model.config();
  const int64_t prompt = 128;
  const int warmup = o.quick ? 2 : 8, steps = o.quick ? 8 : 64;
  const int64_t ctx_blocks = (prompt + warmup + steps + 15) / 16;
  engine_cuda::DeviceKvCache cache(c, {.block_size = 16, .n_blocks = 64 * ctx_blocks + 64},
                           model.precision());

  // Batch 1, base only.
  const DecodeRun one_e = time_decode(model, cache, nullptr, {-1}, prompt, warmup, steps, false);
  const DecodeRun one = time_decode(model, cache, nullptr, {-1}, prompt, warmup, steps, true);
  const double bound = bandwidth / decode_bytes(model, one.mean_context);
  std::printf("gpu_decode batch 1: eager %.1f tokens/s (%.3f ms/step), graph %.1f tokens/s "
              "(%.3f ms/step)\n",
              one_e.tokens_per_s, one_e.ms_per_step, one.tokens_per_s, one.ms_per_step);
  std::printf("gpu_decode bandwidth bound = %.1f tokens/s (%.3f GB per step)\n", bound,
              decode_bytes(model, one.mean_context) / 1e9);
  std::printf("gpu_decode/bandwidth_bound = %.3f graph, %.3f eager (goal >= 0.7, graph)\n",
              one.tokens_per_s / bound, one_e.tokens_per_s / bound);

  // Batch 64: one adapter for all rows, then 64 distinct rank-8 adapters.
  engine::LoraPoolOptions po{.max_slots = 64, .max_rank = 8, .targets = gpu_bench_targets()};
  engine_cuda::DeviceLoraPool pool(c, po);
  // 64 distinct adapters; on a routed-experts model (70 MB each at the Qwen3-30B-A3B width)
  // 8 distinct ones fill the 64 slots in turn: the batch still spans 64 slots and segments.
  const int32_t distinct = c.moe.n_experts > 0 ? 8 : 64;
  std::vector<engine::LoraWeights> adapters;
  for (int32_t i = 0; i < distinct; ++i) {
    adapters.push_back(engine::LoraWeights::random(c, 8, 16.0f, gpu_bench_targets(),
                                                   uint64_t(1000 + i), 0.02f, 0.02f));
  }
  for (int32_t slot = 0; slot < 64; ++slot) pool.load(slot, adapters[size_t(slot % distinct)]);
  pool.synchronize();
  const std::vector<int32_t> single(64, 0);
  std::vector<int32_t> hetero(64);
  for (int32_t i = 0; i < 64; ++i) hetero[size_t(i)] = i;
  const DecodeRun s1_e = time_decode(model, cache, &pool, single, prompt, warmup, steps, false);
  const DecodeRun s64_e = time_decode(model, cache, &pool, hetero, prompt, warmup, steps, false);
  const DecodeRun s1 = time_decode(model, cache, &pool, single, prompt, warmup, steps, true);
  const DecodeRun s64 = time_decode(model, cache, &pool, hetero, prompt, warmup, steps, true);
  std::printf("gpu_decode batch 64, one adapter: eager %.1f tokens/s (%.3f ms/step), graph "
              "%.1f tokens/s (%.3f ms/step)\n",
              s1_e.tokens_per_s, s1_e.ms_per_step, s1.tokens_per_s, s1.ms_per_step);
  std::printf("gpu_decode batch 64, 64 adapters: eager %.1f tokens/s (%.3f ms/step), graph "
              "%.1f tokens/s (%.3f ms/step)\n",
              s64_e.tokens_per_s, s64_e.ms_per_step, s64.tokens_per_s, s64.ms_per_step);
  std::printf("gpu_hetero/single = %.3f graph, %.3f eager (goal >= 0.9, graph)\n",
              s64.tokens_per_s / s1.tokens_per_s, s64_e.tokens_per_s / s1_e.tokens_per_s);

  time_sgmv(model, pool, o.quick ? 50 : 500);
}

}  // namespace spindle::bench
