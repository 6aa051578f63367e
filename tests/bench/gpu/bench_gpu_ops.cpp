// Where a batch-1 decode step's time goes: every op of one layer (and the head) timed alone at
// batch 1 on the bench model's real weights, each as 200 launches captured in one CUDA graph
// (how the decode step runs), against the op's own bandwidth bound (bytes it must read / copy
// bandwidth). Printed as "op  us  bound_us  fraction".

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_gpu.h"
#include "spindle/engine_cuda/device_kv_cache.h"
#include "spindle/kernels/cuda/activation.h"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/cuda/rope.h"
#include "spindle/kernels/cuda/sampling.h"

namespace spindle::bench {
namespace {

namespace cuda = kernels::cuda;
using cuda::bf16;

// Microseconds per launch of `op`, replaying a graph of `reps` back-to-back launches.
double graph_us(cudaStream_t s, const std::function<void()>& op, int reps) {
  op();  // eager once: lazy cuBLAS/kernel initialisation outside the capture
  cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  cudaGraph_t graph = nullptr;
  cuda::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "BeginCapture");
  for (int i = 0; i < reps; ++i) op();
  cuda::check(cudaStreamEndCapture(s, &graph), "EndCapture");
  cudaGraphExec_t exec = nullptr;
  cuda::check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cuda::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");  // warm-up
  GpuTimer timer;
  timer.start(s);
  cuda::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
  const double ms = timer.stop_ms(s);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms * 1e3 / reps;
}

}  // namespace

void run_gpu_op_breakdown(engine_cuda::DeviceModel& model, double bandwidth) {
  const engine::ModelConfig& c = model.config();
  if (model.precision() != engine_cuda::Precision::bf16) return;
  const cudaStream_t s = model.stream();
  const engine_cuda::DeviceWeights& w = model.weights();
  const auto& L = w.layer(0);
  const int reps = 200;
  const int64_t wide = std::max({c.dim, c.q_dim(), c.hidden_dim, c.vocab_size});
  engine_cuda::DeviceTensor x(1, wide, engine_cuda::Precision::bf16), y(1, wide, engine_cuda::Precision::bf16),
      z(1, wide, engine_cuda::Precision::bf16);
  x.zero(s);
  y.zero(s);
  z.zero(s);
  std::printf("decode op breakdown (batch 1, one launch, graph replay; bound = bytes read / "
              "copy bandwidth):\n");
  double total = 0, total_bound = 0;
  auto report = [&](const std::string& name, double us, double bytes, int per_layer) {
    const double bound_us = bytes / bandwidth * 1e6;
    std::printf("  %-26s %8.2f us  bound %7.2f us  fraction %.2f  (x%d per step)\n",
                name.c_str(), us, bound_us, bound_us / us, per_layer);
    total += us * per_layer;
    total_bound += bound_us * per_layer;
  };
  auto gemv = [&](const char* name, const engine_cuda::DeviceTensor& W, int64_t k, int64_t n, int count) {
    const double us = graph_us(s, [&] {
      cuda::linear<bf16>(model.blas(), x.data<bf16>(), k, 1, k, W.data<bf16>(), n, y.data<bf16>(),
                         n, 0.0f, s);
    }, reps);
    report(name, us, double(n) * double(k) * 2.0, count);
  };
  const int nl = int(c.n_layers);
  gemv("linear q_proj", L.wq, c.dim, c.q_dim(), nl);
  gemv("linear k_proj", L.wk, c.dim, c.kv_dim(), nl);
  gemv("linear v_proj", L.wv, c.dim, c.kv_dim(), nl);
  gemv("linear o_proj", L.wo, c.q_dim(), c.dim, nl);
  gemv("linear gate_proj", L.w_gate, c.dim, c.hidden_dim, nl);
  gemv("linear up_proj", L.w_up, c.dim, c.hidden_dim, nl);
  gemv("linear down_proj", L.w_down, c.hidden_dim, c.dim, nl);
  gemv("linear unembedding", w.unembedding(), c.dim, c.vocab_size, 1);
  report("rmsnorm (dim)", graph_us(s, [&] {
    cuda::rmsnorm<bf16>(x.data<bf16>(), c.dim, L.attn_norm.data<float>(), y.data<bf16>(), c.dim, 1,
                        c.dim, c.rms_eps, nullptr, s);
  }, reps), double(c.dim) * 2 * 2, 2 * nl + 1);
  report("rmsnorm (q/k heads)", graph_us(s, [&] {
    cuda::rmsnorm<bf16>(x.data<bf16>(), c.head_dim, L.q_norm.data<float>(), x.data<bf16>(),
                        c.head_dim, c.n_heads, c.head_dim, c.rms_eps, nullptr, s);
  }, reps), double(c.q_dim()) * 2 * 2, 2 * nl);
  cuda::DeviceBuffer<int32_t> pos(1);
  pos.upload(std::vector<int32_t>{200});
  report("rope (q)", graph_us(s, [&] {
    cuda::rope<bf16>(x.data<bf16>(), c.q_dim(), 1, c.n_heads, c.head_dim, pos.data(),
                     w.rope_inv_freq().data<float>(), kernels::RopeStyle::half, false, s);
  }, reps), double(c.q_dim()) * 2 * 2, 2 * nl);
  report("swiglu", graph_us(s, [&] {
    cuda::swiglu<bf16>(x.data<bf16>(), y.data<bf16>(), z.data<bf16>(), c.hidden_dim, s);
  }, reps), double(c.hidden_dim) * 2 * 3, nl);

  // Attention over a 200-token context in a paged cache of 16-token blocks.
  const int32_t ctx = 200;
  engine_cuda::DeviceKvCache cache(c, {.block_size = 16, .n_blocks = 16}, engine_cuda::Precision::bf16);
  const engine_cuda::SeqId seq = cache.create();
  std::vector<int64_t> slots;
  cache.append(seq, ctx, slots, s);
  cuda::DeviceBuffer<int64_t> d_slot(1);
  d_slot.upload(std::vector<int64_t>{slots.back()});
  const std::vector<int32_t>& table = cache.block_table(seq);
  cuda::DeviceBuffer<int32_t> d_table(table.size());
  d_table.upload(table);
  cuda::DeviceBuffer<cuda::DeviceAttnSeq> d_seq(1);
  d_seq.upload(std::vector<cuda::DeviceAttnSeq>{
      {.row_begin = 0, .n_new = 1, .n_past = ctx - 1, .table_offset = 0}});
  const cuda::DevicePagedKv<bf16> kv = cache.layer<bf16>(0);
  report("kv_cache_write", graph_us(s, [&] {
    cuda::kv_cache_write<bf16>(kv, x.data<bf16>(), y.data<bf16>(), c.kv_dim(), 1, d_slot.data(), s);
  }, reps), double(c.kv_dim()) * 2 * 4, nl);
  cuda::DeviceBuffer<unsigned char> attn_scratch(
      cuda::attention_scratch_bytes(1, c.n_heads, c.n_kv_heads, c.head_dim, ctx));
  report("attention decode (ctx 200)", graph_us(s, [&] {
    cuda::attention_paged<bf16>(x.data<bf16>(), c.q_dim(), y.data<bf16>(), c.q_dim(), c.n_heads,
                                kv, d_seq.data(), 1, d_table.data(), 1, ctx, 1.0f / std::sqrt(
                                float(c.head_dim)), attn_scratch.data(), attn_scratch.size(), s);
  }, reps), double(ctx) * double(c.kv_dim()) * 2 * 2, nl);

  // Logits shaped like a language model's (a few dominant tokens over a long tail): all-equal
  // logits would time sample_tokens' tie-breaking path, which real rows never take.
  {
    std::vector<float> host(size_t(c.vocab_size));
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (float& v : host) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const double u = double(state >> 11) * 0x1.0p-53;  // [0, 1)
      v = float(-8.0 * std::log(1.0 - u));                 // exponential tail, few large logits
    }
    y.upload(host.data(), int64_t(host.size()), s);
  }
  cuda::DeviceBuffer<cuda::RowSampling> params(1);
  params.upload(std::vector<cuda::RowSampling>{{.temperature = 1.0f, .top_k = 50, .top_p = 0.9f}});
  cuda::DeviceBuffer<int32_t> tok(1);
  cuda::DeviceBuffer<float> lp(1);
  cuda::DeviceBuffer<unsigned char> scratch(
      std::max<size_t>(1, cuda::sampling_scratch_bytes(1, c.vocab_size)));
  report("sample_tokens (top-k/top-p)", graph_us(s, [&] {
    cuda::sample_tokens<bf16>(y.data<bf16>(), c.vocab_size, 1, c.vocab_size, params.data(),
                              tok.data(), lp.data(), scratch.data(), s);
  }, reps), double(c.vocab_size) * 2, 1);
  std::printf("  sum over one step's ops: %.1f us (bound %.1f us, fraction %.2f)\n", total,
              total_bound, total_bound / total);
  cache.release(seq);
}

}  // namespace spindle::bench
