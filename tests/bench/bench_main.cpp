// spindle-bench: speed programs. Every subcommand prints human-readable lines plus exact ratio
// lines ("hetero/single = 0.97") computed from measurements taken in the same run, so the
// ratios mean something on a noisy, shared machine where absolute numbers do not.

#include <CLI/CLI.hpp>
#include <cblas.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "bench.h"
#include "spindle/core/error.h"

namespace spindle::bench {
void register_catalog_bench(CLI::App& app);  // bench_catalog.cpp
void register_grpo_bench(CLI::App& app);  // bench_grpo.cpp
void register_residency_bench(CLI::App& app);  // bench_residency.cpp
void register_service_bench(CLI::App& app);  // bench_service.cpp
void register_soak_bench(CLI::App& app);  // bench_soak.cpp
void register_kill_loop_bench(CLI::App& app);  // bench_kill_loop.cpp
void register_cluster_sim_bench(CLI::App& app);  // bench_cluster_sim.cpp
void register_cluster_bench(CLI::App& app);  // bench_cluster.cpp
#ifdef SPINDLE_BENCH_STUDIO
void register_studio_bench(CLI::App& app);  // bench_studio.cpp (needs the Studio's spindle_ui)
#endif
}

namespace {

// Default fixtures folder: $SPINDLE_SHARED_DIR, else ../shared relative to the current dir.
std::filesystem::path default_shared_dir() {
  if (const char* env = std::getenv("SPINDLE_SHARED_DIR"); env && *env) return env;
  return std::filesystem::path("..") / "shared";
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines appear as measured, also through a pipe
  CLI::App app{"spindle-bench: engine speed, reported as ratios measured in one run"};
  app.require_subcommand(1);
  spindle::bench::register_catalog_bench(app);  // runs from its own callback
  spindle::bench::register_grpo_bench(app);  // runs from its own callback
  spindle::bench::register_residency_bench(app);  // runs from its own callback
  spindle::bench::register_service_bench(app);  // runs from its own callback
  spindle::bench::register_soak_bench(app);  // runs from its own callback
  spindle::bench::register_kill_loop_bench(app);  // runs from its own callback
  spindle::bench::register_cluster_sim_bench(app);  // runs from its own callback
  spindle::bench::register_cluster_bench(app);  // runs from its own callback
#ifdef SPINDLE_BENCH_STUDIO
  spindle::bench::register_studio_bench(app);  // runs from its own callback
#endif

  spindle::bench::EngineBenchOptions engine_opts;
  std::string shared;
  CLI::App* engine = app.add_subcommand(
      "engine", "decode/prefill tokens/s, LoRA and heterogeneous-batch cost, bandwidth bound");
  engine->add_option("--model", engine_opts.model,
                     "model (a): llama2.c .bin or HF dir (default: stories260K under --shared)");
  engine->add_option("--shared", shared, "fixtures folder (default: $SPINDLE_SHARED_DIR or ../shared)");
  engine->add_flag("--quick", engine_opts.quick, "smoke run: 4-layer Qwen3 shape, fewer steps");
  engine
      ->add_option("--arch", engine_opts.arch,
                   "qwen3_moe | deepseek_v3: a Qwen3-30B-A3B-shaped MoE (DeepSeek-V3's MLA and "
                   "router at that width) cut to 2 layers instead")
      ->check(CLI::IsMember({"qwen3_moe", "deepseek_v3"}));
  engine->add_option("--threads", engine_opts.threads,
                     "OpenBLAS and OpenMP threads (default: OpenBLAS's own default)")
      ->check(CLI::Range(1, 1024));

  spindle::bench::TrainBenchOptions train_opts;
  std::string worker_mode;
  CLI::App* train = app.add_subcommand(
      "train", "LoRA fwd+bwd tokens/s, K policies in one pass vs one after another, peak RSS");
  CLI::App* worker = app.add_subcommand("train-worker", "(internal) one mode of `train`");
  worker->group("");  // hidden
  for (CLI::App* cmd : {train, worker}) {
    cmd->add_option("--policies", train_opts.policies, "K policies")->check(CLI::Range(1, 64));
    cmd->add_option("--tokens", train_opts.tokens, "tokens per policy per step")
        ->check(CLI::Range(2, 4096));
    cmd->add_option("--repeats", train_opts.repeats, "timed steps per mode")
        ->check(CLI::Range(1, 100));
    cmd->add_flag("--quick", train_opts.quick, "4-layer Qwen3 shape");
  }
  train->add_option("--demo-base", train_opts.demo_base, "HF dir built by `spindle make-base`");
  worker->add_option("--mode", worker_mode, "multi | sequential")->required();

  try {
    app.parse(argc, argv);
    train_opts.self_exe = std::filesystem::canonical("/proc/self/exe").string();
    if (train->parsed()) spindle::bench::run_train_bench(train_opts);
    if (worker->parsed()) spindle::bench::run_train_worker(train_opts, worker_mode);
    if (engine->parsed()) {
      engine_opts.shared_dir = shared.empty() ? default_shared_dir() : std::filesystem::path(shared);
      // Decode runs its GEMV/GEMM in OpenBLAS and the rest in OpenMP kernels; both use the
      // same thread count, and so does the bandwidth probe.
      if (engine_opts.threads > 0) openblas_set_num_threads(engine_opts.threads);
      engine_opts.threads = openblas_get_num_threads();
      omp_set_num_threads(engine_opts.threads);
      spindle::bench::run_engine_bench(engine_opts);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const spindle::Error& e) {
    std::fprintf(stderr, "spindle-bench: error (%s): %s\n", spindle::error_code_name(e.code()),
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindle-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
