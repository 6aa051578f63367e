// spindle-bench-gpu [--quick] [--layers N] [--arch qwen3_moe]: the GPU bench of issue 6 (see
// bench_gpu.h); with --arch qwen3_moe, decode on a Qwen3-30B-A3B shape (issue 18).

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "../bench.h"
#include "bench_gpu.h"
#include "spindle/engine_cuda/device_weights.h"
#include "spindle/kernels/cuda/runtime.h"

namespace spindle::bench {
namespace {

namespace cuda = kernels::cuda;

int run(const GpuBenchOptions& o) {
  if (cuda::device_count() == 0) {
    std::printf("spindle-bench-gpu: no CUDA device\n");
    return 1;
  }
  cuda::check(cudaSetDevice(0), "cudaSetDevice");
  std::printf("device: %s\n", cuda::device_name(0).c_str());

  const double bandwidth = gpu_copy_bandwidth(size_t(2) << 30, o.quick ? 3 : 10);
  std::printf("copy_bandwidth = %.1f GB/s (device-to-device cudaMemcpyAsync, read + write)\n",
              bandwidth / 1e9);

  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<engine_cuda::DeviceWeights> weights;
  const engine::ModelConfig config =
      o.moe ? qwen3_30b_a3b_config(o.n_layers) : qwen3_0_6b_config(o.n_layers);
  {
    const engine::ModelWeights host = fast_random_weights(config, 42);
    weights = std::make_unique<engine_cuda::DeviceWeights>(host, engine_cuda::Precision::bf16);
  }
  std::printf("model: %s, %lld layers, bf16, %.2f GB on the device (built in %.1f s)\n",
              config.name.c_str(), (long long)o.n_layers, double(weights->bytes()) / 1e9,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  engine_cuda::DeviceModel model(*weights);
  run_gpu_decode_bench(model, o, bandwidth);
  if (o.moe) return 0;  // the op breakdowns and the training bench are the dense model's
  run_gpu_op_breakdown(model, bandwidth);
  run_gpu_train_bench(model, o);
  run_gpu_train_breakdown(model);
  return 0;
}

}  // namespace
}  // namespace spindle::bench

int main(int argc, char** argv) {
  spindle::bench::GpuBenchOptions o;
  bool layers_given = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      o.quick = true;
    } else if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
      o.n_layers = std::atoll(argv[++i]);
      layers_given = true;
    } else if (std::strcmp(argv[i], "--arch") == 0 && i + 1 < argc &&
               std::strcmp(argv[i + 1], "qwen3_moe") == 0) {
      o.moe = true;
      ++i;
    } else {
      std::fprintf(stderr, "usage: spindle-bench-gpu [--quick] [--layers N] [--arch qwen3_moe]\n");
      return 2;
    }
  }
  if (!layers_given) o.n_layers = o.moe ? 2 : o.quick ? 4 : 28;
  if (o.n_layers < 1) {
    std::fprintf(stderr, "spindle-bench-gpu: --layers must be >= 1\n");
    return 2;
  }
  try {
    return spindle::bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindle-bench-gpu: %s\n", e.what());
    return 1;
  }
}
