// spindle reward: score completions from a JSONL file with a reward spec, list reward plugins.
// Stdout carries only the result (the distribution table or JSON); the reward host's own
// output goes to stderr.

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

// Samples -n completions per prompt of the first --rows rows from --policy on the daemon,
// scores them with the spec (reward host on this machine) and prints the distribution.
void run_test(const RewardArgs& a) {
  const rewards::RewardSpec spec = rewards::RewardSpec::parse(read_file_to_string(a.spec), a.spec);
  rewards::RewardScorer scorer(host_options(a));
  scorer.validate(spec);  // before any sampling: a bad spec costs nothing
  std::ifstream in(a.data);
  SPINDLE_CHECK(in.good(), io, "reward: cannot open --data {}", a.data);
  const auto client = connect_remote(a.remote);
  std::vector<rewards::RewardItem> items;
  std::string line;
  size_t used = 0;
  for (size_t lineno = 1; used < a.rows && std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = a.data + ":" + std::to_string(lineno);
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    SPINDLE_CHECK(row.is_object(), format, "{}: not a JSON object", where);
    std::string prompt_key = a.prompt_field;
    if (!row.contains(prompt_key) && row.contains("question")) prompt_key = "question";
    SPINDLE_CHECK(row.contains(prompt_key) && row[prompt_key].is_string(), invalid_argument,
                  "{}: no string field '{}' (--prompt-field)", where, a.prompt_field);
    const std::string prompt = row[prompt_key];
    std::string reference;
    for (const char* k : {"reference", "answer", "output"}) {
      if (row.contains(k) && row[k].is_string()) {
        reference = row[k];
        break;
      }
    }
    const auto sampled =
        client->sample(a.policy, client->tokenize(prompt), a.num_samples, a.sampling);
    for (const auto& s : sampled.sequences) {
      rewards::RewardItem item;
      item.prompt = prompt;
      item.completion = s.text;
      item.completion_tokens = s.tokens;
      item.reference = reference;
      item.metadata_json = row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      items.push_back(std::move(item));
    }
    ++used;
  }
  SPINDLE_CHECK(!items.empty(), invalid_argument, "reward: {} holds no rows", a.data);
  const rewards::RewardBatch batch = scorer.score(spec, items);
  const rewards::RewardReport report = rewards::summarize(spec, batch, a.bins);
  print(a.json ? rewards::report_to_json(report) + "\n" : rewards::format_report(report));
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
    text += p.name + "  (" + p.path + ")\n  " + p.description + "\n  config schema: " +
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
      "test", "Sample N completions per prompt from a policy on a running spindled and print the "
              "per-term and total score distribution");
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
  add_remote_options(*test, args->remote);
  CLI::App* plugins = cmd->add_subcommand("plugins", "List reward plugins with their schemas");
  for (CLI::App* sub : {score, test, plugins}) {
    sub->add_flag("--json", args->json, "print JSON");
    sub->add_option("--plugin-dir", args->plugin_dirs, "plugin folder (repeatable)");
    sub->add_option("--timeout-ms", args->timeout_ms, "per-call plugin timeout (default 10000)");
  }
  score->callback([args] { run_score(*args); });
  test->callback([args] { run_test(*args); });
  plugins->callback([args] { run_plugins(*args); });
}

}  // namespace spindle::cli
