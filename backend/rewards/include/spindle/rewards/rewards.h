#pragma once
// Rewards (DESIGN.md "Rewards"): reward specs (weighted sums of plugin terms) scored by plugins
// that run in a separate process, `spindle-reward-host`, so a plugin that crashes, hangs past
// its timeout or returns NaN fails that call with a typed error and never takes the caller down.
//
// RewardScorer owns one host child process (spawned on first use, restarted after a failure)
// and one ZeroMQ socket to it (a PAIR/REQ over ipc in a private temp dir). It is used by one
// thread at a time (the GRPO runner's); make one per thread otherwise.
//
// Errors (spindle::Error): invalid_argument for a spec or config that does not validate (the
// message names the term, its plugin and the config field); not_found for an unknown plugin;
// unsupported for an ABI mismatch (message names the plugin file, its ABI and ours); resource
// for a plugin that timed out or took the host to its memory limit (the message names the
// limit); internal for a plugin that crashed the host, returned a non-finite score (message
// names the plugin and the item index) or left processes running after its call (the host
// killed them).
//
// Containment: the host runs under an address-space limit (RewardHostOptions::memory_limit_mib)
// in a process group of its own; what a plugin forks is killed with the host, and killed after
// each call when the plugin did not wait for it (src/host_protocol.h "Containment").

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace spindle::rewards {

// One completion to score.
struct RewardItem {
  std::string prompt;                  // prompt text
  std::string completion;              // completion text
  std::vector<int32_t> completion_tokens;
  std::string reference;               // reference answer ("" if none)
  std::string metadata_json = "{}";    // dataset row fields the plugins may use
};

// One weighted term: plugin `plugin` with its JSON config; `name` labels metrics.
struct RewardTerm {
  std::string name;
  std::string plugin;
  double weight = 1.0;
  std::string config_json = "{}";
};

// {"terms": [{"name": "...", "plugin": "...", "weight": 1.0, "config": {...}}, ...]}
struct RewardSpec {
  std::vector<RewardTerm> terms;
  // Parses and checks the JSON shape (not the plugin configs: RewardScorer::validate).
  // `source` names the file in errors.
  static RewardSpec parse(const std::string& json_text, const std::string& source);
  std::string to_json() const;
};

struct PluginInfo {
  std::string name;
  std::string description;
  std::string config_schema_json;  // JSON Schema of the config object
  std::string path;                // the shared object
  uint32_t abi_version = 0;
  std::string version;             // the plugin's own version ("" when it declares none)
};

struct RewardBatch {
  std::vector<double> total;                   // [n] Σ weight · term score
  std::vector<std::vector<double>> per_term;   // [terms][n], unweighted
  std::vector<std::vector<std::string>> info;  // [terms][n], plugin-provided info ("" if none)
};

struct RewardHostOptions {
  std::filesystem::path host_binary;                // "" = spindle-reward-host beside this exe
  std::vector<std::filesystem::path> plugin_dirs;   // "" = the built-in plugin dir(s)
  std::chrono::milliseconds timeout{10000};         // per score call
  // The host's address-space limit (RLIMIT_AS) in MiB, inherited by what its plugins fork;
  // 0 = none, else at least kMinRewardHostMemoryMib. Not applied in sanitizer builds.
  int64_t memory_limit_mib = 2048;
};

// The smallest memory_limit_mib a host starts in (it maps about 100 MiB before any plugin).
inline constexpr int64_t kMinRewardHostMemoryMib = 128;

class RewardScorer {
 public:
  explicit RewardScorer(RewardHostOptions options = {});
  ~RewardScorer();  // stops the host
  RewardScorer(const RewardScorer&) = delete;
  RewardScorer& operator=(const RewardScorer&) = delete;

  std::vector<PluginInfo> plugins();  // every plugin found in plugin_dirs, sorted by name
  // Stops the host and forgets the plugin list, so the next call starts a fresh host that
  // scans the plugin folders again (picking up files added since); default folders
  // (RewardHostOptions::plugin_dirs empty) are looked up again too.
  void rescan();
  // Every term's plugin exists and its config validates against the plugin's schema and its
  // create(); throws invalid_argument / not_found naming the term.
  void validate(const RewardSpec& spec);
  // Scores `items` with every term; throws as described above (the host is restarted for the
  // next call after a crash or a timeout).
  RewardBatch score(const RewardSpec& spec, std::span<const RewardItem> items);
  uint64_t host_restarts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spindle::rewards
