// spindle-bench kill-loop N: N SIGKILLs of a real spindled at random points while a client
// trains and saves revisions (weights and state, durable and ephemeral) and a GRPO run steps.
// After each kill, before the restart, the catalog is opened directly and every revision whose
// save was acknowledged is read back (checksum verified) and `PRAGMA integrity_check` runs;
// after the restart, runs the kill interrupted are resumed through the daemon. Prints
// acknowledged_lost (goal 0), integrity_ok, restarts_ok and runs_resumed as counts of N.
// Bounded: each round lasts at most a few seconds.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "spindled_process.h"
#include "spindle/catalog/catalog.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/protocol/client.h"

namespace spindle::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace protocol;
using spindle::testing::SpindledProcess;

struct KillLoopOptions {
  fs::path shared_dir;
  fs::path spindled;
  int rounds = 10;
  uint64_t seed = 1;
  bool keep = false;
};

struct Acked {
  std::string tenant, policy, revision_id;
  bool ephemeral = false;
};

std::string run_config(int round) {
  json policy = {{"name", "kl-run-" + std::to_string(round)},
                 {"rank", 4},
                 {"alpha", 8},
                 {"learning_rate", 1e-2},
                 {"dataset", {{"name", "inline"}, {"prompts", {"Once upon a time", "One day"}}}},
                 {"reward", {{"terms", {{{"name", "cat"}, {"plugin", "keywords"}, {"weight", 1},
                                          {"config", {{"present", {"cat"}}}}}}}}}};
  json c = {{"seed", round},        {"steps", 100000}, {"group_size", 2},
            {"prompts_per_step", 1}, {"max_tokens", 8}, {"eval_every", 0},
            {"save_every", 1},       {"eval_prompts", 0}};
  c["policies"] = {policy};
  return c.dump();
}

// Trains, saves and records each acknowledged revision until the daemon dies (a call fails).
void workload(const std::string& endpoint, const std::string& token, int round,
              const std::vector<int32_t>& prompt, std::mutex& mu, std::vector<Acked>& acked,
              std::vector<std::string>& runs) {
  try {
    ClientOptions co;
    co.endpoint = endpoint;
    co.token = token;
    co.timeout_ms = 10000;
    Client c(co);
    try {
      const auto started = c.run_start(run_config(round));
      std::lock_guard lock(mu);
      runs.push_back(started.run_id);
    } catch (const ClientError& e) {  // e.g. no reward plugins found: train only
      if (round == 0) std::printf("kill-loop: no GRPO run (run_start: %s)\n", e.what());
    }
    CreateTrainingRequest create;
    create.base_model = "stories260K";
    create.policy = "kl-" + std::to_string(round);
    create.rank = 4;
    create.alpha = 8;
    create.seed = uint64_t(round);
    const auto s = c.create_training(create);
    std::vector<Datum> data(1);
    data[0].model_input.assign(prompt.begin(), prompt.end() - 1);
    data[0].target_tokens.assign(prompt.begin() + 1, prompt.end());
    for (int step = 0;; ++step) {
      c.forward_backward(s.session_id, data);
      AdamParamsMsg adam;
      adam.learning_rate = 1e-2f;
      c.optim_step(s.session_id, adam);
      SaveReply saved;
      const bool ephemeral = step % 3 == 2;
      if (ephemeral) {
        SaveRequest r{s.session_id, "", "", 3600};
        saved = std::get<SaveReply>(c.call(Op::save_weights, r).body);
      } else {
        saved = step % 2 ? c.save_state(s.session_id) : c.save_weights(s.session_id);
      }
      std::lock_guard lock(mu);  // acknowledged: the reply arrived
      acked.push_back({c.server().tenant, create.policy, saved.revision_id, ephemeral});
    }
  } catch (const std::exception&) {
    // The daemon was killed: the round's work ends here.
  }
}

void run_kill_loop(const KillLoopOptions& o) {
  const fs::path model = o.shared_dir / "models" / "stories260K" / "stories260K.bin";
  if (!fs::exists(model)) {
    std::printf("kill-loop: skipped: fixture missing: %s\n", model.c_str());
    return;
  }
  const auto tok = engine::load_tokenizer(model.parent_path() / "tok512.bin");
  const std::vector<int32_t> prompt = tok->encode("Once upon a time there was a cat");
  const fs::path dir = fs::temp_directory_path() / ("spindle_kill_loop_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::mt19937_64 rng(o.seed);
  std::vector<Acked> acked;
  std::vector<std::string> runs;
  std::mutex mu;
  int restarts_ok = 0, integrity_ok = 0, runs_resumed = 0, runs_interrupted = 0;
  int64_t lost = 0, checked = 0;
  const std::vector<std::string> args = {"--model", model.string(), "--log-level", "warn"};
  for (int round = 0; round < o.rounds; ++round) {
    std::unique_ptr<SpindledProcess> daemon;
    try {
      daemon = std::make_unique<SpindledProcess>(o.spindled, dir, args, 60);
      ++restarts_ok;
    } catch (const std::exception& e) {
      std::printf("round %d: restart failed: %s\n", round, e.what());
      break;
    }
    // Runs the previous kill interrupted (the daemon marks them stopped at start-up).
    {
      ClientOptions co;
      co.endpoint = daemon->endpoints().at(0);
      co.token = daemon->token();
      co.timeout_ms = 10000;
      Client c(co);
      std::vector<std::string> pending;
      {
        std::lock_guard lock(mu);
        pending.swap(runs);
      }
      for (const std::string& id : pending) {
        const auto st = c.run_status(id);
        if (st.run.status == "done" || st.run.status == "failed") {
          std::printf("round %d: run %s was %s (%s)\n", round, id.c_str(), st.run.status.c_str(),
                      st.run.error.c_str());
          continue;
        }
        ++runs_interrupted;
        try {
          const auto r = c.run_resume(id);
          if (r.run.status == "running" || r.run.status == "queued") ++runs_resumed;
        } catch (const ClientError& e) {
          std::printf("round %d: run %s not resumed: %s\n", round, id.c_str(), e.what());
        }
        c.run_stop(id);  // one live run at a time
      }
    }
    std::thread work(workload, daemon->endpoints().at(0), daemon->token(), round, std::cref(prompt),
                     std::ref(mu), std::ref(acked), std::ref(runs));
    const int delay_ms = 300 + int(rng() % 2700);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    daemon->kill_now();
    work.join();
    daemon.reset();

    // Every acknowledged revision reads back with its checksum; the database is sound.
    catalog::Catalog cat(dir);
    const catalog::CheckReport report = cat.check();
    if (report.integrity == "ok" && report.foreign_keys.empty()) ++integrity_ok;
    std::lock_guard lock(mu);
    for (const Acked& a : acked) {
      ++checked;
      try {
        cat.read_revision(a.tenant, catalog::Address{a.tenant, a.policy, a.revision_id});
      } catch (const std::exception& e) {
        ++lost;
        std::printf("round %d: acknowledged %s/%s@%s lost: %s\n", round, a.tenant.c_str(),
                    a.policy.c_str(), a.revision_id.substr(0, 12).c_str(), e.what());
      }
    }
    std::printf("round %d: killed after %d ms; %zu acknowledged revisions verified\n", round,
                delay_ms, acked.size());
  }
  std::printf("kill_loop: %d rounds, %lld revision reads\n", o.rounds, (long long)checked);
  std::printf("acknowledged_lost = %lld\n", (long long)lost);
  std::printf("integrity_ok = %d/%d\n", integrity_ok, o.rounds);
  std::printf("restarts_ok = %d/%d\n", restarts_ok, o.rounds);
  std::printf("runs_resumed = %d/%d\n", runs_resumed, runs_interrupted);
  if (!o.keep) fs::remove_all(dir);
  if (lost != 0 || restarts_ok != o.rounds || integrity_ok != o.rounds ||
      runs_resumed != runs_interrupted) {
    throw std::runtime_error("kill-loop: acknowledged data lost, a restart failed, the catalog "
                             "is unsound or a run did not resume (see above)");
  }
}

}  // namespace

void register_kill_loop_bench(CLI::App& app) {
  auto o = std::make_shared<KillLoopOptions>();
  auto shared = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "kill-loop", "N SIGKILLs during saves, training and GRPO runs; acknowledged_lost, restarts_ok");
  cmd->add_option("rounds", o->rounds, "N kills")->check(CLI::Range(1, 100000));
  cmd->add_option("--seed", o->seed, "kill timing seed");
  cmd->add_flag("--keep", o->keep, "keep the data dir");
  cmd->add_option("--shared", *shared, "fixtures folder (default: $SPINDLE_SHARED_DIR or ../shared)");
  cmd->add_option("--spindled", o->spindled, "spindled binary (default: beside this program's build)");
  cmd->callback([o, shared] {
    o->shared_dir = shared_dir_or_default(*shared);
    if (o->spindled.empty()) o->spindled = default_spindled();
    run_kill_loop(*o);
  });
}

}  // namespace spindle::bench
