// spindle reward: score completions from a JSONL file with a reward spec (score, local reward
// host), sample and score on a running spindled (test: the daemon's reward_test op, which
// samples and scores server-side), list reward plugins. Stdout carries only the result (the
// distribution table or JSON); the reward host's own output goes to stderr.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "remote.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/rewards/rewards.h"
#include "spindle/rewards/summary.h"

namespace spindle::cli {
namespace {

struct RewardArgs {
  std::string spec;
  std::string data;
  std::string completion_field = "completion";
  bool json = false;
  std::vector<std::string> plugin_dirs;
  int timeout_ms = 10000;
  size_t bins = 10;
  // reward test: sample from a policy on a running spindled first.
  std::string policy;
  int32_t num_samples = 4;
  size_t rows = 8;
  bool samples = false;  // reward test: also print every scored completion
  std::string prompt_field = "prompt";
  protocol::SamplingParamsMsg sampling;
  RemoteOptions remote;
};

rewards::RewardHostOptions host_options(const RewardArgs& a) {
  rewards::RewardHostOptions o;
  for (const std::string& d : a.plugin_dirs) o.plugin_dirs.emplace_back(d);
  o.timeout = std::chrono::milliseconds(a.timeout_ms);
  return o;
}

void print(const std::string& s) {
  SPINDLE_CHECK(std::fwrite(s.data(), 1, s.size(), stdout) == s.size() && std::fflush(stdout) == 0,
                io, "reward: writing to stdout failed");
}

void run_score(const RewardArgs& a) {
  const rewards::RewardSpec spec = rewards::RewardSpec::parse(read_file_to_string(a.spec), a.spec);
  std::ifstream in(a.data);
  SPINDLE_CHECK(in.good(), io, "reward: cannot open --data {}", a.data);
  std::vector<rewards::RewardItem> items;
  std::string line;
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    items.push_back(rewards::reward_item_from_jsonl(line, a.completion_field,
                                                    a.data + ":" + std::to_string(lineno)));
  }
  SPINDLE_CHECK(!items.empty(), invalid_argument, "reward: {} holds no rows", a.data);
  rewards::RewardScorer scorer(host_options(a));
  scorer.validate(spec);
  const rewards::RewardBatch batch = scorer.score(spec, items);
  const rewards::RewardReport report = rewards::summarize(spec, batch, a.bins);
  print(a.json ? rewards::report_to_json(report) + "\n" : rewards::format_report(report));
}

rewards::Distribution distribution(const protocol::DistributionInfo& d) {
  return {size_t(d.n), d.mean, d.std, d.min, d.max,
          std::vector<size_t>(d.histogram.begin(), d.histogram.end())};
}

// The reply's distributions as summary.h's report, so the table and JSON are the ones
// `reward score` prints.
rewards::RewardReport report_of(const protocol::RewardTestResult& r) {
  rewards::RewardReport report;
  for (const auto& t : r.terms) {
    report.term_names.push_back(t.name);
    report.weights.push_back(t.weight);
    report.terms.push_back(distribution(t.scores));
  }
  report.total = distribution(r.total);
  return report;
}

// --samples: one line per completion (row, total, per-term scores, text) after the table.
std::string format_samples(const protocol::RewardTestResult& r) {
  std::string out = "\nsamples (row, total, per-term scores, completion):\n";
  for (const auto& s : r.samples) {
    std::string scores;
    for (double v : s.scores) scores += fmt::format(" {:.4f}", v);
    nlohmann::json text = s.text;
    out += fmt::format("{:>4} {:>9.4f} [{} ] {}\n", s.row, s.total, scores,
                       text.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return out;
}

nlohmann::json samples_json(const protocol::RewardTestResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : r.samples) {
    nlohmann::json scores = nlohmann::json::object();
    for (size_t t = 0; t < r.terms.size() && t < s.scores.size(); ++t) {
      scores[r.terms[t].name] = s.scores[t];
    }
    out.push_back({{"row", s.row}, {"completion", s.text}, {"stop_reason", s.stop_reason},
                   {"tokens", s.tokens}, {"scores", scores}, {"infos", s.infos},
                   {"total", s.total}});
  }
  return out;
}

// Sends the first --rows rows of --data, the spec and the sampling parameters to the daemon's
// reward_test op, which samples -n completions per prompt from --policy and scores them with
// its own reward host; prints the distribution it returns.
void run_test(const RewardArgs& a) {
  protocol::RewardTestRequest req;
  req.spec_json = read_file_to_string(a.spec);
  // Parsed here too so a malformed file is reported with its path before connecting.
  rewards::RewardSpec::parse(req.spec_json, a.spec);
  std::ifstream in(a.data);
  SPINDLE_CHECK(in.good(), io, "reward: cannot open --data {}", a.data);
  std::string line;
  for (size_t lineno = 1; req.rows.size() < a.rows && std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = a.data + ":" + std::to_string(lineno);
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    SPINDLE_CHECK(row.is_object(), format, "{}: not a JSON object", where);
    std::string prompt_key = a.prompt_field;
    if (!row.contains(prompt_key) && row.contains("question")) prompt_key = "question";
    SPINDLE_CHECK(row.contains(prompt_key) && row[prompt_key].is_string(), invalid_argument,
                  "{}: no string field '{}' (--prompt-field)", where, a.prompt_field);
    protocol::RewardTestRow r;
    r.prompt = row[prompt_key];
    for (const char* k : {"reference", "answer", "output"}) {
      if (row.contains(k) && row[k].is_string()) {
        r.reference = row[k];
        break;
      }
    }
    r.metadata_json = row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    req.rows.push_back(std::move(r));
  }
  SPINDLE_CHECK(!req.rows.empty(), invalid_argument, "reward: {} holds no rows", a.data);
  req.address = a.policy;
  req.num_samples = a.num_samples;
  req.sampling_params = a.sampling;
  req.bins = uint32_t(a.bins);
  const protocol::RewardTestResult result = connect_remote(a.remote)->reward_test(req);
  const rewards::RewardReport report = report_of(result);
  if (a.json) {
    nlohmann::json j = nlohmann::json::parse(rewards::report_to_json(report));
    j["revision_id"] = result.revision_id;
    if (a.samples) j["samples"] = samples_json(result);
    print(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } else {
    print(rewards::format_report(report) + (a.samples ? format_samples(result) : ""));
  }
}

void run_plugins(const RewardArgs& a) {
  rewards::RewardScorer scorer(host_options(a));
  const std::vector<rewards::PluginInfo> plugins = scorer.plugins();
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : plugins) {
      nlohmann::json schema = nlohmann::json::parse(p.config_schema_json, nullptr, false);
      out.push_back({{"name", p.name},
                     {"description", p.description},
                     {"version", p.version},
                     {"path", p.path},
                     {"abi_version", p.abi_version},
                     {"config_schema", schema.is_discarded() ? nlohmann::json(p.config_schema_json)
                                                             : schema}});
    }
    print(out.dump(2) + "\n");
    return;
  }
  std::string text;
  for (const auto& p : plugins) {
    text += p.name + (p.version.empty() ? "" : " " + p.version) + "  (" + p.path + ")\n  " +
            p.description + "\n  config schema: " +
            nlohmann::json::parse(p.config_schema_json, nullptr, false).dump() + "\n";
  }
  print(text);
}

}  // namespace

void register_reward(CLI::App& app) {
  auto args = std::make_shared<RewardArgs>();
  CLI::App* cmd = app.add_subcommand("reward", "Reward specs and plugins");
  cmd->require_subcommand(1);

  CLI::App* score = cmd->add_subcommand(
      "score", "Score completions from a JSONL file and print the score distribution");
  score->add_option("--spec", args->spec, "reward spec JSON file")->required();
  score->add_option("--data", args->data,
                    "JSONL rows: prompt, completion, reference/answer; other fields -> metadata")
      ->required();
  score->add_option("--completion-field", args->completion_field,
                    "field holding the completion (default: completion)");
  score->add_option("--bins", args->bins, "histogram bins (default 10)");
  CLI::App* test = cmd->add_subcommand(
      "test", "Sample N completions per prompt from a policy on a running spindled, score them "
              "there (its reward plugins) and print the per-term and total score distribution");
  test->add_option("--spec", args->spec, "reward spec JSON file")->required();
  test->add_option("--data", args->data,
                   "JSONL rows with a prompt (--prompt-field, else 'question') and optionally a "
                   "reference ('reference', 'answer' or 'output'); the row is the metadata")
      ->required();
  test->add_option("--policy", args->policy, "policy address, or a base model id")->required();
  test->add_option("-n,--num-samples", args->num_samples, "completions per prompt (default 4)");
  test->add_option("--rows", args->rows, "prompts used from the top of --data (default 8)");
  test->add_option("--prompt-field", args->prompt_field, "prompt field (default: prompt)");
  test->add_option("--max-tokens", args->sampling.max_tokens, "tokens per completion (default 16)");
  test->add_option("--temperature", args->sampling.temperature, "sampling temperature (default 1)");
  test->add_option("--seed", args->sampling.seed, "sampling seed (default 0)");
  test->add_option("--bins", args->bins, "histogram bins (default 10)");
  test->add_flag("--samples", args->samples,
                 "also print every completion with its scores (--json: a \"samples\" array)");
  test->add_flag("--json", args->json, "print JSON");
  add_remote_options(*test, args->remote);
  CLI::App* plugins = cmd->add_subcommand("plugins", "List reward plugins with their schemas");
  for (CLI::App* sub : {score, plugins}) {
    sub->add_flag("--json", args->json, "print JSON");
    sub->add_option("--plugin-dir", args->plugin_dirs, "plugin folder (repeatable)");
    sub->add_option("--timeout-ms", args->timeout_ms, "per-call plugin timeout (default 10000)");
  }
  score->callback([args] { run_score(*args); });
  test->callback([args] { run_test(*args); });
  plugins->callback([args] { run_plugins(*args); });
}

}  // namespace spindle::cli
