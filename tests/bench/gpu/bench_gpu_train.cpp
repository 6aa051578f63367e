// LoRA training speed on the GPU: rank 16 on every linear layer, a batch of sequences of 256
// tokens, forward_backward + optim_step per step (cross-entropy), timed after one warm-up step.

#include <cstdio>
#include <vector>

#include "bench_gpu.h"
#include "spindle/engine/trainer.h"
#include "spindle/engine_cuda/trainer.h"

namespace spindle::bench {

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
}

}  // namespace spindle::bench
