// reward_plugins and plugin_rescan (worker_ops.h).

#include <algorithm>

#include "worker_ops.h"

namespace spindle::service {

using namespace protocol;

void reply_reward_plugins(Daemon& d, rewards::RewardScorer& scorer, const Call& call) {
  RewardPluginsReply out;
  for (const rewards::PluginInfo& p : scorer.plugins()) {
    out.plugins.push_back(
        {p.name, p.description, p.version, p.abi_version, p.config_schema_json, p.path});
  }
  std::sort(out.plugins.begin(), out.plugins.end(),
            [](const RewardPluginInfo& a, const RewardPluginInfo& b) { return a.name < b.name; });
  if (call.op == Op::plugin_rescan) {
    d.log->info("plugin_rescan (tenant {}): {} reward plugin(s)", call.tenant, out.plugins.size());
  }
  d.replies->ok(call, std::move(out));
}

}  // namespace spindle::service
