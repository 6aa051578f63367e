// spindle-bench grpo: GRPO over K LoRA policies on one resident base (spindle/rl/grpo_run.h),
// K concurrent policies in ONE run (their sample jobs batch together and their
// forward_backward jobs merge in the scheduler) against the same K policies run one after
// another, for K = 1, 2, 4, 8. Same steps, group size, prompts per step, max_tokens, threads
// and scheduler options (LocalEngineOptions) in both modes.
//
// Bases (--base):
//   qwen3-shape (default): Qwen3-0.6B's layers (dim 1024, MLP 3072, 16 q / 8 kv heads of 128,
//     q/k norms) with random weights, --layers of them (4: 253 MB of fp32 weights), and the
//     byte tokenizer of `spindle make-base`, built once into a temp directory that every worker
//     loads. Group 4 x 1 prompt per step: each policy contributes 4 rows to a decode step, so a
//     policy alone streams every weight from memory for 4 rows while K concurrent policies
//     stream them once for 4K rows. That is the regime concurrent policies (MinT) are for: a
//     forward bound by memory bandwidth, few rows per policy. Reward: length in code points
//     (random bytes vary in it; cheap). A trainer call holds at most one policy's step
//     (train_tokens_per_pass), so a pass that merges K policies does not hold K policies'
//     activations at once. Threads: 1 per worker, both modes (see below).
//   stories260k: the shared stories260K fixture, keywords reward (one word per policy); group
//     8 x 4 prompts. Its forward is 260K parameters: per-step overhead dominates, so
//     concurrency gains little there (kept to watch that overhead).
// Threads (OpenBLAS and OpenMP, --threads): 1 per worker by default, the same in both modes.
// Measured on the shared two-core machine, 2 threads made the qwen3-shape walls 2-3x longer
// and far noisier (libgomp threads spinning against OpenBLAS's and other processes), for both
// modes; use --threads N on a quiet machine with N cores.
//
// Each (mode, K) runs in its own child process (`grpo-worker`, this program re-executed), so
// peak RSS (VmHWM) is per mode. A worker loads the base once, runs one small untimed warm-up
// run (first-touch, the reward host's first start), then --repeats timed repetitions of the
// mode's GrpoRun::run() call(s), and reports the median repetition (by wall) and the peak RSS
// read after the first repetition (later ones add what the allocator kept from earlier ones;
// the peak after all of them is printed too):
//   wall  = the whole run() (construction, reward host start, session open/close, every step;
//           K of each in sequential mode),
//   steps = Σ step_time_s, split into sampling, rewards (+ advantages and training data) and
//           training (forward_backward + optim_step) by StepMetrics' phase times.
// Policies keep uniform-reward groups (drop_uniform_groups = false): every step trains.
// grpo_speedup_kK = sequential wall / concurrent wall.
// grpo_cpu_speedup_kK = the same ratio of the workers' CPU time (user + system, all threads,
// the timed repetition only): with one thread per worker it is what the wall would be on an
// idle core, so it shows when a change of machine load between the two workers skewed walls.
// grpo_speedup_bound_kK = what concurrency could give at most on this machine: sequential steps
// / (their sampling / K + rewards + training). Sharing the base pays in sampling (a decode step
// of a few rows per policy costs about what one of K times as many rows costs: both stream
// every weight); training (forward_backward over every prompt + completion token) is bound by
// arithmetic on a CPU, so a merged pass costs K policies' passes and that part never shrinks.
// The full bench takes about 2 minutes on an idle two-core machine (4 under heavy load).
// grpo_peak_ratio_kK = (peak(concurrent K) − K·B) / (peak(one policy alone) − B), where
// B = one policy's adapter bytes + its AdamW moments (m and v: 2 × adapter bytes) = 3 × the
// float32 bytes of init_lora()'s A and B tensors. The reward host is a separate process and
// not in VmHWM.
//
// API workaround: a policy's seed is sample_seed(run seed, index + 1), so policy k of a
// concurrent run cannot be reproduced as policy 0 of a one-policy run; sequential run k uses
// run seed + k instead (same amount of work, different draws). Sampled token counts of both
// modes are printed, so a different completion length shows.

#include <CLI/CLI.hpp>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_grpo.h"
#include "spindle/core/error.h"
#include "spindle/engine/trainer.h"
#include "spindle/rl/grpo_run.h"
#include "spindle/rl/local_engine.h"

namespace spindle::bench {
namespace {

namespace fs = std::filesystem;
using grpo::BaseKind;
using grpo::GrpoBenchOptions;

rl::RunConfig run_config(uint64_t seed, int64_t steps, int32_t group, int32_t prompts,
                         int32_t max_tokens) {
  rl::RunConfig c;
  c.seed = seed;
  c.steps = steps;
  c.group_size = group;
  c.prompts_per_step = prompts;
  c.max_tokens = max_tokens;
  c.eval_every = 0;
  c.save_every = 0;
  c.eval_prompts = 0;  // no held-out evaluation: every timed second is a GRPO step
  return c;
}

// Adapter + AdamW (m, v) bytes of one policy: 3 × init_lora()'s float32 tensor bytes.
size_t policy_state_bytes(const engine::ModelConfig& config, int32_t rank) {
  using T = engine::LoraTarget;
  const T targets[] = {T::q, T::k, T::v, T::o, T::gate, T::up, T::down};  // GrpoRun's default
  const engine::LoraWeights w = engine::init_lora(config, rank, 2.0f * float(rank), targets, 1);
  size_t adapter = 0;
  for (const auto& layer : w.modules) {
    for (const auto& pair : layer) adapter += pair.A.bytes() + pair.B.bytes();
  }
  return 3 * adapter;
}

// CPU seconds (user + system) of every thread of this process so far.
double process_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

struct RunTotals {
  double wall = 0, cpu = 0, steps = 0, sample = 0, reward = 0, tokens = 0;
};

// One GrpoRun::run(); adds its wall, CPU time, Σ step times (and phases) and sampled tokens.
void timed_run(rl::LocalEngine& engine, const rl::RunConfig& c, RunTotals& t) {
  rl::RunContext ctx;
  ctx.scheduler = &engine.scheduler();
  ctx.model_config = engine.weights().config;
  ctx.tokenizer = &engine.tokenizer();
  const double cpu0 = process_cpu_s();
  const auto t0 = Clock::now();
  rl::GrpoRun run(c, ctx);
  run.run();
  t.wall += seconds_since(t0);
  t.cpu += process_cpu_s() - cpu0;
  SPINDLE_CHECK(run.status().state == rl::RunState::finished, internal, "GRPO run ended {}",
                rl::run_state_name(run.status().state));
  const std::string first = c.policies.front().name;
  for (const rl::StepMetrics& m : run.history()) {
    if (!m.trained) continue;
    if (m.policy == first) {  // every policy of a step shares its times
      t.steps += m.step_time_s;
      t.sample += m.sample_time_s;
      t.reward += m.reward_time_s;
    }
    t.tokens += m.response_length * double(c.group_size) * double(c.prompts_per_step);
  }
}

struct WorkerArgs {
  std::string mode;
  int policies = 1;
  int max_policies = 8;
};

// Worker: one mode in this process. Prints
// "RESULT <wall s> <cpu s> <steps s> <sampling s> <rewards s> <peak bytes after the first repetition>
// <tokens> <policy bytes> <peak bytes after all> <resident bytes after all>" and
// "STATS <engine steps> <train passes> <jobs merged>" (per repetition, the mean).
void run_grpo_worker(const GrpoBenchOptions& o, const WorkerArgs& w) {
  SPINDLE_CHECK(w.mode == "concurrent" || w.mode == "sequential", invalid_argument,
                "--mode must be concurrent or sequential, got '{}'", w.mode);
  rl::LocalEngine engine(o.model, grpo::engine_options(o, w.max_policies));
  {
    rl::RunConfig warm = run_config(o.seed + 1000, 1, 2, 1, 8);
    warm.policies.push_back(grpo::bench_policy(o, 0));
    RunTotals ignored;
    timed_run(engine, warm, ignored);
  }
  const scheduler::SchedulerStats before = engine.scheduler().stats();
  std::vector<RunTotals> reps;
  double first_peak = 0;
  for (int r = 0; r < o.repeats; ++r) {
    RunTotals t;
    if (w.mode == "concurrent") {
      rl::RunConfig c = run_config(o.seed, o.steps, o.group, o.prompts, o.max_tokens);
      for (int k = 0; k < w.policies; ++k) c.policies.push_back(grpo::bench_policy(o, k));
      timed_run(engine, c, t);
    } else {
      for (int k = 0; k < w.policies; ++k) {
        rl::RunConfig c = run_config(o.seed + uint64_t(k), o.steps, o.group, o.prompts,
                                     o.max_tokens);
        c.policies.push_back(grpo::bench_policy(o, k));
        timed_run(engine, c, t);
      }
    }
    reps.push_back(t);
    if (r == 0) first_peak = vm_status_bytes("VmHWM");
  }
  std::sort(reps.begin(), reps.end(), [](const RunTotals& a, const RunTotals& b) {
    return a.wall < b.wall;
  });
  const RunTotals& t = reps[reps.size() / 2];  // the median repetition (by wall)
  const scheduler::SchedulerStats after = engine.scheduler().stats();
  std::printf("RESULT %.6f %.6f %.6f %.6f %.6f %.0f %.0f %zu %.0f %.0f\n", t.wall, t.cpu,
              t.steps, t.sample, t.reward, first_peak, t.tokens,
              policy_state_bytes(engine.weights().config, o.rank), vm_status_bytes("VmHWM"),
              vm_status_bytes("VmRSS"));
  std::printf("STATS %llu %llu %llu\n",
              (unsigned long long)(after.engine_steps - before.engine_steps) / o.repeats,
              (unsigned long long)(after.train_passes - before.train_passes) / o.repeats,
              (unsigned long long)(after.train_jobs_merged - before.train_jobs_merged) / o.repeats);
}

struct ModeResult {
  double wall = 0, cpu = 0, steps = 0, sample = 0, reward = 0, peak = 0, tokens = 0,
         policy_bytes = 0, peak_end = 0, rss_end = 0;
  unsigned long long engine_steps = 0, passes = 0, merged = 0;
};

ModeResult run_mode(const GrpoBenchOptions& o, const std::string& mode, int k, int max_k) {
  const std::string self = fs::canonical("/proc/self/exe").string();
  std::ostringstream cmd;
  // Through the environment: both libraries read it at start-up, and it reaches every thread
  // (omp_set_num_threads would only set the calling thread's, not the scheduler's).
  cmd << "OMP_NUM_THREADS=" << o.threads << " OPENBLAS_NUM_THREADS=" << o.threads << ' ';
  cmd << '"' << self << "\" grpo-worker --mode " << mode << " --k " << k << " --max-k " << max_k
      << " --base " << grpo::base_kind_name(o.base) << " --model \"" << o.model.string()
      << "\" --steps " << o.steps << " --group " << o.group << " --prompts " << o.prompts
      << " --max-tokens " << o.max_tokens << " --rank " << o.rank << " --seed " << o.seed
      << " --repeats " << o.repeats << " --device " << o.device;
  FILE* p = ::popen(cmd.str().c_str(), "r");
  SPINDLE_CHECK(p != nullptr, io, "cannot start {}", cmd.str());
  char line[512];
  ModeResult r;
  bool found = false;
  while (std::fgets(line, sizeof line, p)) {
    if (std::sscanf(line, "RESULT %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", &r.wall, &r.cpu,
                    &r.steps, &r.sample, &r.reward, &r.peak, &r.tokens, &r.policy_bytes,
                    &r.peak_end, &r.rss_end) == 10) {
      found = true;
    }
    std::sscanf(line, "STATS %llu %llu %llu", &r.engine_steps, &r.passes, &r.merged);
  }
  const int status = ::pclose(p);
  SPINDLE_CHECK(found && WIFEXITED(status) && WEXITSTATUS(status) == 0, internal,
                "grpo worker '{}' K={} failed (status {})", mode, k, status);
  return r;
}

void print_mode(const char* label, const ModeResult& r) {
  const double train = r.steps - r.sample - r.reward;
  std::printf("  %-10s wall %7.2f s, cpu %7.2f s (steps %7.2f s: sampling %7.2f s, rewards %6.2f "
              "s, training %7.2f s), %6.0f sampled tok, %llu engine steps, %llu train passes "
              "(%llu jobs merged, ~%.0f completion tok per pass); peak RSS %.1f MiB (after all "
              "repetitions %.1f MiB, resident at the end %.1f MiB)\n",
              label, r.wall, r.cpu, r.steps, r.sample, r.reward, train, r.tokens, r.engine_steps,
              r.passes, r.merged, r.passes ? r.tokens / double(r.passes) : 0.0, r.peak / (1 << 20),
              r.peak_end / (1 << 20), r.rss_end / (1 << 20));
}

void run_grpo_bench(GrpoBenchOptions o) {
  std::sort(o.policies.begin(), o.policies.end());
  o.policies.erase(std::unique(o.policies.begin(), o.policies.end()), o.policies.end());
  if (o.policies.front() != 1) o.policies.insert(o.policies.begin(), 1);  // the peak baseline
  const int max_k = o.policies.back();
  std::optional<grpo::TempQwen3Base> built;
  if (o.model.empty()) {  // qwen3-shape without --model: build it once, for every worker
    built.emplace(o.layers, /*seed=*/7);
    o.model = built->dir();
  }
  const rl::LocalEngineOptions eo = grpo::engine_options(o, max_k);
  std::printf("== GRPO, K LoRA policies on one base: %s (%s)%s ==\n", grpo::base_kind_name(o.base),
              o.model.string().c_str(), o.quick ? " (QUICK)" : "");
  if (built) {
    std::printf("qwen3-shape: Qwen3-0.6B layer shape, %lld layers, random weights, byte "
                "tokenizer: %.0f MB fp32 (built in %.1f s)\n",
                (long long)o.layers, built->weight_bytes() / 1e6, built->build_s());
  }
  std::printf("%lld steps x %d prompts x group %d, max_tokens %d, rank %d on q,k,v,o,gate,up,down, "
              "%s, seed %llu\n",
              (long long)o.steps, o.prompts, o.group, o.max_tokens, o.rank,
              grpo::reward_description(o).c_str(), (unsigned long long)o.seed);
  std::printf("scheduler (every worker): token_budget %lld, train_tokens_per_pass %lld, "
              "training_slots %d, max_rank %d, kv_blocks %lld; threads %d; each mode in its own "
              "process, after an untimed warm-up run, median of %d\n",
              (long long)eo.token_budget, (long long)eo.train_tokens_per_pass, eo.training_slots,
              eo.max_rank, (long long)eo.kv_blocks, o.threads, o.repeats);
  std::fflush(stdout);
  ModeResult alone;
  ModeResult widest;
  for (int k : o.policies) {
    const ModeResult seq = run_mode(o, "sequential", k, max_k);
    const ModeResult conc = run_mode(o, "concurrent", k, max_k);
    std::printf("K=%d:\n", k);
    print_mode("sequential", seq);
    print_mode("concurrent", conc);
    std::printf("grpo_speedup_k%d = %.2f\n", k, seq.wall / conc.wall);
    std::printf("grpo_cpu_speedup_k%d = %.2f\n", k, seq.cpu / conc.cpu);
    std::printf("grpo_steps_speedup_k%d = %.2f (sampling %.2f, training %.2f)\n", k,
                seq.steps / conc.steps, seq.sample / conc.sample,
                (seq.steps - seq.sample - seq.reward) / (conc.steps - conc.sample - conc.reward));
    // The most concurrency could give here: sampling fully shared (one policy's decode steps
    // for all K) while training, bound by arithmetic, stays K policies' work.
    const double seq_train = seq.steps - seq.sample - seq.reward;
    std::printf("grpo_speedup_bound_k%d = %.2f (sequential steps / (sampling / K + rewards + "
                "training))\n",
                k, seq.steps / (seq.sample / k + seq.reward + seq_train));
    std::fflush(stdout);
    if (k == 1) alone = conc;
    widest = conc;
  }
  const double b = alone.policy_bytes;
  std::printf("policy state B = adapter %.0f bytes (float32 A and B of init_lora: rank %d on 7 "
              "targets of every layer) + AdamW m and v (2 x %.0f) = %.0f bytes\n",
              b / 3, o.rank, b / 3, b);
  std::printf("peak concurrent K=%d %.0f bytes - %d x B = %.0f; peak one policy alone %.0f bytes "
              "- B = %.0f\n",
              max_k, widest.peak, max_k, widest.peak - max_k * b, alone.peak, alone.peak - b);
  std::printf("grpo_peak_ratio_k%d = %.3f\n", max_k,
              (widest.peak - max_k * b) / (alone.peak - b));
}

BaseKind parse_base(const std::string& name) {
  if (name == "qwen3-shape") return BaseKind::qwen3_shape;
  if (name == "stories260k") return BaseKind::stories260k;
  SPINDLE_THROW(invalid_argument, "--base must be qwen3-shape or stories260k, got '{}'", name);
}

}  // namespace

void register_grpo_bench(CLI::App& app) {
  auto o = std::make_shared<GrpoBenchOptions>();
  auto shared = std::make_shared<std::string>();
  auto model = std::make_shared<std::string>();
  auto base = std::make_shared<std::string>("qwen3-shape");
  auto w = std::make_shared<WorkerArgs>();
  CLI::App* cmd = app.add_subcommand(
      "grpo", "GRPO: K concurrent policies on one base vs one after another (wall, peak RSS)");
  cmd->add_option("--shared", *shared, "fixtures folder (default: $SPINDLE_SHARED_DIR or ../shared)");
  cmd->add_option("--layers", o->layers, "qwen3-shape: layers of the built base (default 4)")
      ->check(CLI::Range(1, 28));
  cmd->add_option("--policies", o->policies, "values of K (default 1 2 4 8; 1 is always run)")
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--quick", o->quick,
                "smoke run: K = 1, 2; fewer steps and tokens, 1 repetition");
  CLI::App* worker = app.add_subcommand("grpo-worker", "(internal) one mode of `grpo`");
  worker->group("");  // hidden
  worker->add_option("--mode", w->mode, "concurrent | sequential")->required();
  worker->add_option("--k", w->policies)->required()->check(CLI::Range(1, 64));
  worker->add_option("--max-k", w->max_policies)->check(CLI::Range(1, 64));
  worker->add_option("--model", *model)->required();
  for (CLI::App* c : {cmd, worker}) {
    c->add_option("--base", *base,
                  "qwen3-shape (default: Qwen3-0.6B layers, random weights, built in a temp "
                  "dir) | stories260k (the shared fixture)");
    c->add_option("--steps", o->steps, "GRPO steps per run")->check(CLI::Range(1, 1000));
    c->add_option("--group", o->group, "completions per prompt")->check(CLI::Range(2, 64));
    c->add_option("--prompts", o->prompts, "prompts per step")->check(CLI::Range(1, 64));
    c->add_option("--max-tokens", o->max_tokens, "completion tokens at most")
        ->check(CLI::Range(1, 256));
    c->add_option("--rank", o->rank, "LoRA rank")->check(CLI::Range(1, 32));
    c->add_option("--seed", o->seed, "run seed");
    c->add_option("--device", o->device, "where the workers' engines run: cpu, cuda, cuda:N "
                  "(peak memory is the host's VmHWM either way)")->capture_default_str();
    c->add_option("--repeats", o->repeats, "timed repetitions per mode (median reported)")
        ->check(CLI::Range(1, 100));
  }
  cmd->add_option("--model", *model,
                  "a base to load instead (stories260k: default under --shared; qwen3-shape: "
                  "default built)");
  cmd->add_option("--threads", o->threads,
                  "workers' OpenBLAS and OpenMP threads (default 1)")
      ->check(CLI::Range(1, 1024));
  cmd->callback([o, shared, model, base, cmd] {
    o->base = parse_base(*base);
    if (cmd->count("--policies") == 0 && o->quick) o->policies = {1, 2};
    grpo::apply_base_defaults(*o);
    if (!shared->empty()) o->shared_dir = *shared;
    else if (const char* e = std::getenv("SPINDLE_SHARED_DIR"); e && *e) o->shared_dir = e;
    else o->shared_dir = fs::path("..") / "shared";
    if (!model->empty()) o->model = *model;
    else if (o->base == BaseKind::stories260k)
      o->model = o->shared_dir / "models/stories260K/stories260K.bin";
    if (!o->model.empty()) {
      SPINDLE_CHECK(fs::exists(o->model), not_found, "no model at {} (--shared / --model)",
                    o->model.string());
      o->model = fs::canonical(o->model);
    }
    run_grpo_bench(*o);
  });
  worker->callback([o, model, base, w] {
    o->base = parse_base(*base);
    grpo::apply_base_defaults(*o);
    o->model = *model;
    run_grpo_worker(*o, *w);
  });
}

}  // namespace spindle::bench
