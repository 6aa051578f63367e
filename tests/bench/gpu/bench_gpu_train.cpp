// LoRA training speed on the GPU: rank 16 on every linear layer, a batch of sequences of 256
// tokens, forward_backward + optim_step per step (cross-entropy), timed after one warm-up step,
// against the compute bound: the step's matrix-product FLOPs at the device's dense bf16 peak.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_gpu.h"
#include "spindle/engine/trainer.h"
#include "spindle/engine_cuda/trainer.h"

namespace spindle::bench {
namespace {

// Matrix-product FLOPs of one LoRA training step (forward_backward of a dense model, frozen
// base): every linear layer and the unembedding forward and its input gradient (2 · 2·T·params;
// no weight gradients), causal attention (QKᵀ and PV forward; recomputed scores, dV, dP, dQ, dK
// backward: 7 products over the causal half, 7·L²·head_dim per head and sequence), and the
// LoRA products (shrink/expand forward; dh, dB, dA, dx backward: 6·2·T·r·(d_in + d_out) / 2).
double train_step_flops(const engine::ModelConfig& c, int64_t n_seqs, int64_t seq_len,
                        int64_t rank) {
  const double T = double(n_seqs * seq_len);
  const double dim = double(c.dim), q = double(c.q_dim()), kv = double(c.kv_dim()),
               hidden = double(c.hidden_dim);
  const double layer_params = dim * q + 2 * dim * kv + q * dim + 3 * dim * hidden;
  const double base = 4 * T * (double(c.n_layers) * layer_params + dim * double(c.vocab_size));
  const double L = double(seq_len);
  const double attention = double(c.n_layers) * double(n_seqs) * double(c.n_heads) * 7 * L * L *
                           double(c.head_dim);
  // (d_in + d_out) of the adapted projections of one layer (gpu_bench_targets: all but lm_head).
  const double lora_io = (dim + q) + 2 * (dim + kv) + (q + dim) + 2 * (dim + hidden) +
                         (hidden + dim);
  const double lora = 6 * T * double(rank) * lora_io * double(c.n_layers);
  return base + attention + lora;
}

// Dense bf16 tensor-core peak of device 0, FLOP/s: SMs × clock × dense bf16 FLOPs per SM per
// clock of the architecture (Ampere 2048, Hopper 4096, Blackwell 8192; others 1024), or
// SPINDLE_GPU_PEAK_TFLOPS. The clock is the attribute's peak, so this errs high (an H100 SXM's
// 989 TFLOPS datasheet figure uses 1.83 GHz, the attribute says 1.98).
double dense_bf16_peak(std::string* how) {
  if (const char* env = std::getenv("SPINDLE_GPU_PEAK_TFLOPS")) {
    *how = std::string("SPINDLE_GPU_PEAK_TFLOPS=") + env;
    return std::atof(env) * 1e12;
  }
  int sms = 0, khz = 0, major = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  const double per_clock = major == 8 ? 2048 : major == 9 ? 4096 : major >= 10 ? 8192 : 1024;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%d SMs x %.2f GHz x %.0f (sm_%dx)", sms, khz / 1e6, per_clock,
                major);
  *how = buf;
  return double(sms) * double(khz) * 1e3 * per_clock;
}

}  // namespace

void run_gpu_train_bench(engine_cuda::DeviceModel& model, const GpuBenchOptions& o) {
  const engine::ModelConfig& c = model.config();
  const int64_t seq_len = 256, n_seqs = o.quick ? 2 : 8;
  const int steps = o.quick ? 2 : 5;
  engine_cuda::DeviceLoraPool pool(c, {.max_slots = 1, .max_rank = 16, .targets = gpu_bench_targets()});
  engine_cuda::DeviceTrainer trainer(model, pool);
  trainer.attach(0, engine::init_lora(c, 16, 32.0f, gpu_bench_targets(), 7));

  std::vector<engine::TrainDatum> batch(static_cast<size_t>(n_seqs));
  for (int64_t i = 0; i < n_seqs; ++i) {
    engine::TrainDatum& d = batch[size_t(i)];
    d.slot = 0;
    for (int64_t t = 0; t < seq_len; ++t) {
      d.input_tokens.push_back(int32_t((i * 7919 + t * 104729) % c.vocab_size));
      d.target_tokens.push_back(int32_t((i * 7919 + (t + 1) * 104729) % c.vocab_size));
    }
  }
  const engine::AdamParams hp{.learning_rate = 1e-4f};
  GpuTimer timer;
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 1 + steps; ++step) {
    if (step == 1) timer.start(model.stream());
    const auto out = trainer.forward_backward(batch, engine::LossFn::cross_entropy);
    trainer.optim_step(0, hp);
    const double per_token = out.metrics.loss / double(out.metrics.n_tokens);
    if (step == 0) first_loss = per_token;
    last_loss = per_token;
  }
  const double ms = timer.stop_ms(model.stream());
  const double tokens = double(n_seqs * seq_len) * steps;
  std::printf(
      "gpu_train lora rank 16, %lld x %lld tokens = %.1f tokens/s (%.1f ms/step; loss "
      "%.4f -> %.4f per token)\n",
      (long long)n_seqs, (long long)seq_len, tokens / (ms / 1e3), ms / steps, first_loss,
      last_loss);
  const double flops = train_step_flops(c, n_seqs, seq_len, 16);
  std::string how;
  const double peak = dense_bf16_peak(&how);
  const double bound_ms = flops / peak * 1e3;
  std::printf("gpu_train_tokens_per_s = %.1f (goal >= 113500, 10x session 11's 11350)\n",
              tokens / (ms / 1e3));
  std::printf("gpu_train compute bound: %.1f GFLOP per step at %.0f TFLOPS dense bf16 (%s) = "
              "%.2f ms/step\n",
              flops / 1e9, peak / 1e12, how.c_str(), bound_ms);
  std::printf("gpu_train/compute_bound = %.3f (goal >= 0.3)\n", bound_ms / (ms / steps));
}

}  // namespace spindle::bench
