// spindle run start|ls|status|stop|resume: GRPO runs on a running spindled (remote.h finds the
// endpoint and token). A run's config is spindle grpo's JSON (spindle/rl/config.h); its
// "tenant" is replaced by the caller's.

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <thread>

#include "commands.h"
#include "remote.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"

namespace spindle::cli {

namespace {

using json = nlohmann::json;

struct RunArgs {
  RemoteOptions remote;
  std::string config;
  std::string run_id;
  bool resume = false;
  bool follow = false;
  bool json = false;
  uint32_t limit = 50;
};

json run_json(const protocol::RunInfo& r) {
  return {{"id", r.id},
          {"tenant", r.tenant},
          {"status", r.status},
          {"error", r.error},
          {"step", r.step},
          {"steps", r.steps},
          {"policies", r.policies},
          {"created_ms", r.created_ms},
          {"updated_ms", r.updated_ms}};
}

json metric_json(const protocol::RunMetricInfo& m) {
  json j = json::parse(m.metrics_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) j = m.metrics_json;
  return {{"step", m.step}, {"policy", m.policy}, {"metrics", j}};
}

void print_run_line(const protocol::RunInfo& r) {
  std::printf("%s  %-8s step %lld/%lld  %s%s\n", r.id.c_str(), r.status.c_str(),
              (long long)r.step, (long long)r.steps, fmt::format("{}", fmt::join(r.policies, " ")).c_str(),
              r.error.empty() ? "" : ("  (" + r.error + ")").c_str());
}

double number(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

void print_metric_line(const protocol::RunMetricInfo& m) {
  const json j = json::parse(m.metrics_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    std::printf("step %lld %s: %s\n", (long long)m.step, m.policy.c_str(), m.metrics_json.c_str());
    return;
  }
  std::string line;
  if (j.contains("reward_mean")) {  // a training step (step 0 only evaluates)
    line = fmt::format("step {} {}: reward {:.3f}±{:.3f} loss {:.4f} kl {:.4f} entropy {:.3f} "
                       "len {:.1f} {:.0f} tok/s",
                       m.step, m.policy, number(j, "reward_mean"), number(j, "reward_std"),
                       number(j, "loss"), number(j, "kl"), number(j, "entropy"),
                       number(j, "response_length"), number(j, "tokens_per_s"));
  } else {
    line = fmt::format("step {} {}: (before training)", m.step, m.policy);
  }
  if (j.contains("eval_accuracy") && j["eval_accuracy"].is_number())
    line += fmt::format(" | held-out accuracy {:.3f}", j["eval_accuracy"].get<double>());
  if (j.contains("revision") && j["revision"].is_string())
    line += fmt::format(" | saved {}", j["revision"].get<std::string>().substr(0, 12));
  std::printf("%s\n", line.c_str());
}

void run_start(const RunArgs& a) {
  const std::string config = read_file_to_string(a.config);
  const auto client = connect_remote(a.remote);
  const protocol::RunStartReply r = client->run_start(config, a.resume);
  if (a.json) {
    std::printf("%s\n", json{{"run_id", r.run_id}, {"policies", r.policies}}.dump().c_str());
  } else {
    std::printf("%s\n", r.run_id.c_str());
    for (const auto& p : r.policies) std::fprintf(stderr, "  training %s\n", p.c_str());
  }
}

void run_ls(const RunArgs& a) {
  const auto client = connect_remote(a.remote);
  json all = json::array();
  std::string cursor;
  do {
    const protocol::RunListReply page = client->run_list(a.limit, cursor);
    for (const auto& r : page.runs) {
      if (a.json) all.push_back(run_json(r));
      else print_run_line(r);
    }
    cursor = page.next_cursor;
  } while (!cursor.empty());
  if (a.json) std::printf("%s\n", all.dump(2).c_str());
}

bool finished(const std::string& status) { return status != "running" && status != "queued"; }

// --follow: polls run_status every second and prints the steps not printed yet, until the run
// is no longer running. --json: one JSON object per metrics row, then the final run record.
void run_status(const RunArgs& a) {
  const auto client = connect_remote(a.remote);
  if (!a.follow) {
    const protocol::RunStatusReply r = client->run_status(a.run_id, 0);
    if (a.json) {
      json metrics = json::array();
      for (const auto& m : r.metrics) metrics.push_back(metric_json(m));
      std::printf("%s\n", json{{"run", run_json(r.run)}, {"metrics", metrics}}.dump(2).c_str());
    } else {
      print_run_line(r.run);
      for (const auto& m : r.metrics) print_metric_line(m);
    }
    return;
  }
  // The policies of one step are stored one by one, so a poll can see some of a step's rows and
  // not the others: each poll asks again from the newest step seen and prints only (step,
  // policy) rows not printed yet; once the run has ended, one last poll from step 0 prints
  // whatever is still missing.
  std::set<std::pair<int64_t, std::string>> printed;
  int64_t since = 0;
  auto print_new = [&](const protocol::RunStatusReply& r) {
    for (const auto& m : r.metrics) {
      if (!printed.insert({m.step, m.policy}).second) continue;
      if (a.json) std::printf("%s\n", metric_json(m).dump().c_str());
      else print_metric_line(m);
      since = std::max(since, m.step);
    }
    std::fflush(stdout);
  };
  for (;;) {
    const protocol::RunStatusReply r = client->run_status(a.run_id, since);
    print_new(r);
    if (finished(r.run.status)) {
      const protocol::RunStatusReply last = client->run_status(a.run_id, 0);
      print_new(last);
      if (a.json) std::printf("%s\n", run_json(last.run).dump().c_str());
      else print_run_line(last.run);
      return;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void run_stop_or_resume(const RunArgs& a, bool stop) {
  const auto client = connect_remote(a.remote);
  const protocol::RunStatusReply r = stop ? client->run_stop(a.run_id) : client->run_resume(a.run_id);
  if (a.json) std::printf("%s\n", run_json(r.run).dump().c_str());
  else print_run_line(r.run);
}

CLI::App* sub(CLI::App& parent, const std::shared_ptr<RunArgs>& a, const char* name,
              const char* help) {
  CLI::App* cmd = parent.add_subcommand(name, help);
  add_remote_options(*cmd, a->remote);
  cmd->add_flag("--json", a->json, "JSON output");
  return cmd;
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand("run", "GRPO runs on a running spindled");
  run->require_subcommand(1);

  CLI::App* start = sub(*run, a, "start", "Start a run from a config JSON; prints its id");
  start->add_option("CONFIG", a->config, "run config JSON (spindle/rl/config.h)")->required();
  start->add_flag("--resume", a->resume,
                  "continue policies that already have revisions (e.g. a catalog fork)");
  start->callback([a] { run_start(*a); });

  CLI::App* ls = sub(*run, a, "ls", "The caller's runs, newest first");
  ls->add_option("--limit", a->limit, "page size")->capture_default_str();
  ls->callback([a] { run_ls(*a); });

  CLI::App* status = sub(*run, a, "status", "A run and its metrics timeline");
  status->add_option("ID", a->run_id, "run id")->required();
  status->add_flag("--follow,-f", a->follow, "print new steps every second until the run ends");
  status->callback([a] { run_status(*a); });

  CLI::App* stop = sub(*run, a, "stop", "Stop a run after its step in progress (it saves)");
  stop->add_option("ID", a->run_id, "run id")->required();
  stop->callback([a] { run_stop_or_resume(*a, /*stop=*/true); });

  CLI::App* resume = sub(*run, a, "resume", "Continue a stopped or failed run from its last revision");
  resume->add_option("ID", a->run_id, "run id")->required();
  resume->callback([a] { run_stop_or_resume(*a, /*stop=*/false); });
}

}  // namespace spindle::cli
