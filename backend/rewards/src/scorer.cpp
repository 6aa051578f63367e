// RewardScorer: drives one spindle-reward-host child (host_process.h) with the protocol in
// host_protocol.h; turns host failures into typed spindle::Errors naming the term and plugin.

#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <cmath>
#include <map>
#include <optional>

#include "host_process.h"
#include "host_protocol.h"
#include "schema_check.h"
#include "spindle/core/error.h"
#include "spindle/rewards/host.h"
#include "spindle/rewards/rewards.h"

namespace spindle::rewards {

using nlohmann::json;
namespace fs = std::filesystem;

struct RewardScorer::Impl {
  RewardHostOptions options;
  zmq::context_t zctx{1};
  fs::path run_dir;  // private folder for the ipc endpoints
  std::unique_ptr<HostProcess> host;
  int spawns = 0;
  // Filled by the first list: name -> info, and name -> (code, message) for refused files.
  std::optional<std::map<std::string, PluginInfo>> plugins;
  std::map<std::string, std::pair<ErrorCode, std::string>> rejected;
  bool default_dirs = false;  // plugin_dirs came from default_plugin_dirs() (rescan redoes it)

  HostProcess& ensure_host() {
    if (!host) {
      host = std::make_unique<HostProcess>(zctx, options, run_dir, spawns);
      ++spawns;
    }
    return *host;
  }

  // One request; `what` names the term and plugin in errors ("term 'acc' (plugin numeric)").
  json call(const json& request, const std::string& what) {
    HostProcess& h = ensure_host();
    json reply;
    try {
      reply = h.call(request, options.timeout);
    } catch (const HostFailure& f) {
      host.reset();  // dead or killed; the next call starts a fresh host
      if (f.kind == HostFailure::Kind::memory_limit) {
        SPINDLE_THROW(resource,
                      "{}: the reward host exceeded its memory limit of {} MiB; the host was "
                      "stopped and is restarted for the next call",
                      what, options.memory_limit_mib);
      }
      if (f.kind == HostFailure::Kind::timed_out) {
        SPINDLE_THROW(resource,
                      "{}: the reward plugin did not answer within {} ms ({}); the host was "
                      "killed and is restarted for the next call",
                      what, options.timeout.count(), f.detail);
      }
      SPINDLE_THROW(internal,
                    "{}: the reward plugin crashed the reward host ({}); the host is restarted "
                    "for the next call",
                    what, f.detail);
    }
    if (!reply.value("ok", false)) {
      const ErrorCode code =
          error_code_from_name(reply.value("code", "")).value_or(ErrorCode::internal);
      throw Error(code, fmt::format("{}: {}", what, reply.value("message", "unknown error")));
    }
    return reply;
  }

  const std::map<std::string, PluginInfo>& list() {
    if (!plugins) {
      json reply = call({{"op", "list"}}, "listing reward plugins");
      std::map<std::string, PluginInfo> out;
      for (const json& p : reply["plugins"]) {
        PluginInfo info;
        info.name = p.value("name", "");
        info.description = p.value("description", "");
        info.config_schema_json = p.value("schema", "{}");
        info.path = p.value("path", "");
        info.abi_version = p.value("abi", 0u);
        info.version = p.value("version", "");
        out[info.name] = info;
      }
      for (const json& r : reply["rejected"]) {
        rejected[r.value("name", "")] = {
            error_code_from_name(r.value("code", "")).value_or(ErrorCode::internal),
            r.value("message", "")};
      }
      plugins = std::move(out);
    }
    return *plugins;
  }

  static std::string label(const RewardTerm& t) {
    return fmt::format("term '{}' (plugin {})", t.name, t.plugin);
  }

  // Plugin exists and its config passes the plugin's schema (no host call beyond the list).
  void check_term(const RewardTerm& t) {
    const auto& known = list();
    auto it = known.find(t.plugin);
    if (it == known.end()) {
      if (auto r = rejected.find(t.plugin); r != rejected.end()) {
        throw Error(r->second.first, fmt::format("{}: {}", label(t), r->second.second));
      }
      std::string names;
      for (const auto& [n, _] : known) names += (names.empty() ? "" : ", ") + n;
      std::string dirs;
      for (const fs::path& d : options.plugin_dirs) dirs += (dirs.empty() ? "" : ", ") + d.string();
      SPINDLE_THROW(not_found, "{}: no reward plugin '{}' (available: {}; searched: {})",
                    label(t), t.plugin, names.empty() ? "none" : names, dirs);
    }
    const json config = json::parse(t.config_json, nullptr, /*allow_exceptions=*/false);
    SPINDLE_CHECK(!config.is_discarded(), invalid_argument, "{}: config is not valid JSON",
                  label(t));
    const json schema =
        json::parse(it->second.config_schema_json, nullptr, /*allow_exceptions=*/false);
    if (!schema.is_discarded()) {
      if (auto v = schema_violation(schema, config, "config")) {
        SPINDLE_THROW(invalid_argument, "{}: {}", label(t), *v);
      }
    }
  }
};

RewardScorer::RewardScorer(RewardHostOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.host_binary.empty()) options.host_binary = default_host_binary();
  impl_->default_dirs = options.plugin_dirs.empty();
  if (options.plugin_dirs.empty()) options.plugin_dirs = default_plugin_dirs();
  SPINDLE_CHECK(options.timeout.count() > 0, invalid_argument,
                "reward host timeout must be positive, got {} ms", options.timeout.count());
  SPINDLE_CHECK(
      options.memory_limit_mib == 0 || options.memory_limit_mib >= kMinRewardHostMemoryMib,
      invalid_argument, "reward host memory limit {} MiB: 0 (none) or at least {} MiB",
      options.memory_limit_mib, kMinRewardHostMemoryMib);
  impl_->options = std::move(options);
  const fs::path tmp = fs::temp_directory_path() / "spindle-reward-XXXXXX";
  std::string templ = tmp.string();
  SPINDLE_CHECK(mkdtemp(templ.data()) != nullptr, io, "cannot create a private folder {}: {}",
                tmp.string(), strerror(errno));
  impl_->run_dir = templ;
}

RewardScorer::~RewardScorer() {
  impl_->host.reset();
  std::error_code ec;
  fs::remove_all(impl_->run_dir, ec);
}

std::vector<PluginInfo> RewardScorer::plugins() {
  std::vector<PluginInfo> out;
  for (const auto& [_, info] : impl_->list()) out.push_back(info);
  return out;
}

void RewardScorer::rescan() {
  impl_->host.reset();
  impl_->plugins.reset();
  impl_->rejected.clear();
  if (impl_->default_dirs) impl_->options.plugin_dirs = default_plugin_dirs();
}

void RewardScorer::validate(const RewardSpec& spec) {
  for (const RewardTerm& t : spec.terms) {
    impl_->check_term(t);
    impl_->call({{"op", "validate"}, {"plugin", t.plugin}, {"config", t.config_json}},
                Impl::label(t));
  }
}

RewardBatch RewardScorer::score(const RewardSpec& spec, std::span<const RewardItem> items) {
  const size_t n = items.size();
  RewardBatch out;
  out.total.assign(n, 0.0);
  if (n == 0) {
    out.per_term.assign(spec.terms.size(), {});
    out.info.assign(spec.terms.size(), {});
    return out;
  }
  for (const RewardTerm& t : spec.terms) impl_->check_term(t);
  json wire_items = json::array();
  for (const RewardItem& it : items) {
    wire_items.push_back({{"prompt", it.prompt},
                          {"completion", it.completion},
                          {"tokens", it.completion_tokens},
                          {"reference", it.reference},
                          {"metadata", it.metadata_json}});
  }
  for (const RewardTerm& t : spec.terms) {
    json reply = impl_->call(
        {{"op", "score"}, {"plugin", t.plugin}, {"config", t.config_json}, {"items", wire_items}},
        Impl::label(t));
    const json& scores = reply["scores"];
    const json& infos = reply["infos"];
    SPINDLE_CHECK(scores.is_array() && scores.size() == n && infos.is_array() &&
                      infos.size() == n,
                  internal, "{}: the host answered {} scores for {} items", Impl::label(t),
                  scores.size(), n);
    std::vector<double> s(n);
    std::vector<std::string> info(n);
    for (size_t i = 0; i < n; ++i) {
      SPINDLE_CHECK(scores[i].is_number() && std::isfinite(scores[i].get<double>()), internal,
                    "{}: item {} got a non-finite score", Impl::label(t), i);
      s[i] = scores[i].get<double>();
      info[i] = infos[i].is_string() ? infos[i].get<std::string>() : "";
      out.total[i] += t.weight * s[i];
    }
    out.per_term.push_back(std::move(s));
    out.info.push_back(std::move(info));
  }
  return out;
}

uint64_t RewardScorer::host_restarts() const {
  return impl_->spawns > 0 ? static_cast<uint64_t>(impl_->spawns - 1) : 0;
}

}  // namespace spindle::rewards
