// spindle grpo: a server-side GRPO run in-process (spindle/rl/grpo_run.h) over a resident base,
// saving revisions into the catalog of the data dir. Without a CONFIG it runs the embedded
// default: the arithmetic base <data-dir>/bases/arith (built with `spindle make-base` when
// missing), dataset "arith", reward numeric_match. Stdout: one line per policy and step (or one
// JSON object per line with --json) and a summary with held-out accuracy before and after.

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "spindle/catalog/catalog.h"
#include "spindle/catalog/data_dir.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/rl/grpo_run.h"
#include "spindle/rl/local_engine.h"

extern char** environ;

namespace spindle::cli {
namespace {

namespace fs = std::filesystem;

struct GrpoArgs {
  std::string config, model, data_dir, datasets;
  int64_t steps = 0;
  bool json = false;
  bool resume = false;
};

fs::path datasets_of(const GrpoArgs& a) {
  if (!a.datasets.empty()) return a.datasets;
  if (const char* s = std::getenv("SPINDLE_SHARED_DIR"); s && *s) return fs::path(s) / "data";
  return fs::path("..") / "shared" / "data";
}

// <data-dir>/bases/arith, built by `spindle make-base` (this executable) when missing.
fs::path default_base(const fs::path& data_dir) {
  const fs::path dir = data_dir / "bases" / "arith";
  if (fs::exists(dir / "config.json")) return dir;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  SPINDLE_CHECK(!ec, io, "cannot read /proc/self/exe: {}", ec.message());
  std::fprintf(stderr, "spindle grpo: building the default base %s with `spindle make-base` "
               "(minutes)\n", dir.string().c_str());
  std::vector<std::string> args = {self.string(), "make-base", "--task", "arithmetic", "--out",
                                   dir.string()};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ);
  SPINDLE_CHECK(rc == 0, io, "cannot start {}: {}", self.string(), std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  SPINDLE_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, internal,
                "`spindle make-base --out {}` failed (status {})", dir.string(), status);
  return dir;
}

// The first of "name", "name-2", ... that has no revisions yet in the tenant.
std::string free_name(catalog::Catalog& cat, const std::string& tenant, const std::string& name) {
  for (int i = 1;; ++i) {
    const std::string n = i == 1 ? name : fmt::format("{}-{}", name, i);
    try {
      if (!cat.get_policy(tenant, n).head) return n;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::not_found) return n;
      throw;
    }
  }
}

void print_step(const rl::StepMetrics& m, bool json) {
  if (json) {
    std::printf("%s\n", m.to_json().c_str());
  } else if (m.trained) {
    std::string line = fmt::format("step {} {}: reward {:.3f}±{:.3f} loss {:.4f} kl {:.4f} "
                                   "entropy {:.3f} clip {:.3f} len {:.1f} dropped {} "
                                   "{:.0f} tok/s {:.2f} s",
                                   m.step, m.policy, m.reward_mean, m.reward_std, m.loss, m.kl,
                                   m.entropy, m.clip_fraction, m.response_length,
                                   m.dropped_groups, m.tokens_per_s, m.step_time_s);
    if (m.eval_accuracy) line += fmt::format(" | held-out accuracy {:.3f}", *m.eval_accuracy);
    if (m.revision) line += fmt::format(" | saved {}", m.revision->substr(0, 12));
    std::printf("%s\n", line.c_str());
  } else if (m.eval_accuracy) {
    std::printf("step 0 %s: held-out accuracy %.3f (before training)\n", m.policy.c_str(),
                *m.eval_accuracy);
  }
  std::fflush(stdout);
}

void run_grpo(const GrpoArgs& args) {
  const fs::path data_dir = catalog::resolve_data_dir(
      args.data_dir.empty() ? fs::path() : fs::absolute(args.data_dir));
  fs::create_directories(data_dir);
  const bool embedded = args.config.empty();
  rl::RunConfig config = embedded ? rl::default_arith_config()
                                  : rl::parse_run_config(read_file_to_string(args.config),
                                                         args.config);
  if (args.steps > 0) config.steps = args.steps;
  fs::path model = args.model.empty() ? fs::path() : fs::absolute(args.model);
  if (model.empty()) {
    SPINDLE_CHECK(embedded, invalid_argument, "--model is required with a CONFIG");
    model = default_base(data_dir);
  }
  SPINDLE_CHECK(fs::exists(model), not_found, "--model {}: no such file or directory",
                model.string());
  const std::string base_id =
      embedded && args.model.empty() ? "arith" : model.filename().replace_extension().string();

  catalog::Catalog cat(data_dir);
  try {
    cat.get_base(base_id);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
    catalog::BaseModel b;
    b.id = base_id;
    b.arch = "llama";
    b.path = model.string();
    cat.register_base(b, "spindle grpo");
  }
  if (embedded && !args.resume) {
    for (auto& p : config.policies) p.name = free_name(cat, config.tenant, p.name);
  }

  rl::LocalEngine engine(model, {.training_slots = int32_t(std::max<size_t>(
                                     8, config.policies.size()))});
  rl::RunContext ctx;
  ctx.scheduler = &engine.scheduler();
  ctx.model_config = engine.weights().config;
  ctx.tokenizer = &engine.tokenizer();
  ctx.catalog_dir = data_dir;
  ctx.base_id = base_id;
  ctx.data_root = datasets_of(args);
  rl::GrpoRun run(config, ctx, {.resume = args.resume});
  std::map<std::string, double> before, after;
  run.on_metrics([&](const rl::StepMetrics& m) {
    print_step(m, args.json);
    if (m.eval_accuracy) {
      if (!before.count(m.policy)) before[m.policy] = *m.eval_accuracy;
      after[m.policy] = *m.eval_accuracy;
    }
  });
  std::fprintf(stderr, "spindle grpo: %zu polic%s on %s, %lld steps of %d prompts x %d samples; "
               "catalog %s\n", config.policies.size(), config.policies.size() == 1 ? "y" : "ies",
               model.string().c_str(), (long long)config.steps, config.prompts_per_step,
               config.group_size, data_dir.string().c_str());
  run.run();
  for (const auto& p : config.policies) {
    const std::string addr = fmt::format("spindle://{}/{}", config.tenant, p.name);
    if (before.count(p.name)) {
      std::printf("summary %s: held-out accuracy %.3f -> %.3f (%s@latest)\n", p.name.c_str(),
                  before[p.name], after[p.name], addr.c_str());
    } else {
      std::printf("summary %s: %s@latest\n", p.name.c_str(), addr.c_str());
    }
  }
  std::fflush(stdout);
}

}  // namespace

void register_grpo(CLI::App& app) {
  auto args = std::make_shared<GrpoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "grpo", "Run GRPO over one or many LoRA policies in-process (default: the arithmetic demo)");
  cmd->add_option("config", args->config, "run config JSON (see spindle/rl/config.h); "
                                           "omit for the embedded arithmetic default");
  cmd->add_option("--model", args->model,
                  "base model (HF dir or llama2.c .bin); default <data-dir>/bases/arith");
  cmd->add_option("--data-dir", args->data_dir, "Spindle data dir (catalog, blobs, bases)");
  cmd->add_option("--datasets", args->datasets,
                  "folder of the built-in datasets (default $SPINDLE_SHARED_DIR/data or "
                  "../shared/data)");
  cmd->add_option("--steps", args->steps, "override the config's steps");
  cmd->add_flag("--json", args->json, "one JSON object of metrics per line");
  cmd->add_flag("--resume", args->resume, "continue the config's policies from their heads");
  cmd->callback([args] { run_grpo(*args); });
}

}  // namespace spindle::cli
