// spindle-reward-host's serve loop: one thread, one PAIR socket (STYLE.md 6); the protocol is
// in host_protocol.h.

#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <zmq.hpp>

#include "host_limits.h"
#include "host_protocol.h"
#include "plugin_registry.h"
#include "spindle/rewards/host.h"

namespace spindle::rewards {
namespace {

using nlohmann::json;

// A context from create(), destroyed on scope exit.
class PluginContext {
 public:
  PluginContext(const spindle_reward_plugin& p, const std::string& config) : p_(p) {
    char err[2048] = {0};
    spindle_reward_status st = p_.create(config.c_str(), &ctx_, err, sizeof(err));
    if (st != SPINDLE_REWARD_OK || ctx_ == nullptr) {
      SPINDLE_THROW(invalid_argument, "{}", err[0] ? err : "create() refused the config");
    }
  }
  ~PluginContext() { p_.destroy(ctx_); }
  PluginContext(const PluginContext&) = delete;
  PluginContext& operator=(const PluginContext&) = delete;
  spindle_reward_ctx* get() const { return ctx_; }

 private:
  const spindle_reward_plugin& p_;
  spindle_reward_ctx* ctx_ = nullptr;
};

std::string config_text(const json& req) {
  return req.contains("config") && req["config"].is_string() ? req["config"].get<std::string>()
                                                              : "{}";
}

json handle_list(PluginRegistry& registry) {
  json plugins = json::array(), rejected = json::array();
  for (const PluginRegistry::Entry* e : registry.load_all()) {
    if (e->table) {
      const spindle_reward_plugin& t = *e->table;
      plugins.push_back({{"name", e->name},
                         {"description", t.description ? t.description : ""},
                         {"schema", t.config_schema_json ? t.config_schema_json : "{}"},
                         {"path", e->path.string()},
                         {"abi", t.abi_version},
                         {"version", plugin_version(t)}});
    } else {
      rejected.push_back({{"name", e->name},
                          {"path", e->path.string()},
                          {"code", error_code_name(e->error_code)},
                          {"message", e->error}});
    }
  }
  return {{"ok", true}, {"plugins", plugins}, {"rejected", rejected}};
}

json handle_score(PluginRegistry& registry, const json& req) {
  const std::string name = req.at("plugin").get<std::string>();
  const spindle_reward_plugin& p = registry.get(name);
  PluginContext ctx(p, config_text(req));
  const json& items = req.at("items");
  const size_t n = items.size();
  // Keep the strings alive while the plugin reads the views.
  std::vector<std::string> prompt(n), completion(n), reference(n), metadata(n);
  std::vector<std::vector<int32_t>> tokens(n);
  std::vector<spindle_reward_item> c_items(n);
  for (size_t i = 0; i < n; ++i) {
    const json& it = items[i];
    prompt[i] = it.value("prompt", "");
    completion[i] = it.value("completion", "");
    reference[i] = it.value("reference", "");
    metadata[i] = it.value("metadata", "{}");
    if (it.contains("tokens")) tokens[i] = it["tokens"].get<std::vector<int32_t>>();
    c_items[i] = {prompt[i].data(),     prompt[i].size(),    completion[i].data(),
                  completion[i].size(), tokens[i].data(),    tokens[i].size(),
                  reference[i].data(),  reference[i].size(), metadata[i].data(),
                  metadata[i].size()};
  }
  std::vector<double> scores(n, 0.0);
  std::vector<const char*> infos(n, nullptr);
  char err[2048] = {0};
  const spindle_reward_status st =
      p.score_batch(ctx.get(), c_items.data(), n, scores.data(), infos.data(), err, sizeof(err));
  if (st != SPINDLE_REWARD_OK) {
    const std::string msg = err[0] ? err : "score_batch() failed without a message";
    if (st == SPINDLE_REWARD_INVALID_ITEM) SPINDLE_THROW(invalid_argument, "{}", msg);
    SPINDLE_THROW(internal, "score_batch() failed (status {}): {}", int(st), msg);
  }
  json out_infos = json::array();
  for (size_t i = 0; i < n; ++i) {
    SPINDLE_CHECK(std::isfinite(scores[i]), internal,
                  "item {} got a non-finite score ({}) from plugin '{}'", i, scores[i], name);
    out_infos.push_back(infos[i] ? infos[i] : "");
  }
  return {{"ok", true}, {"scores", scores}, {"infos", out_infos}};
}

// After a request: a plugin that failed at its memory limit ends the host as if the
// allocation had (a plugin may catch bad_alloc); processes the plugin left are killed and fail
// the request.
void contain(json& reply) {
  const bool ok = reply.value("ok", false);
  if (!ok && near_memory_limit()) exit_memory_limit("the plugin failed near the limit");
  const std::vector<pid_t> left = kill_leftover_children();
  if (left.empty()) return;
  std::string pids;
  for (pid_t p : left) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
  const std::string what = fmt::format(
      "the plugin left {} process(es) behind (pid {}); the reward host killed them (a plugin "
      "must wait for every process it starts before its call returns)",
      left.size(), pids);
  if (ok) {
    reply = wire::error_reply(ErrorCode::internal, what);
  } else {
    reply["message"] = reply.value("message", "") + "; " + what;
  }
}

}  // namespace

int run_reward_host(const RewardHostServerOptions& options) {
  if (options.parent_pid > 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != options.parent_pid) return 0;  // the parent is already gone
  }
  // A crashing plugin must not spend seconds writing a core file of this process.
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  apply_memory_limit(options.memory_limit_mib);
  become_subreaper();
  const pid_t self = getpid();

  PluginRegistry registry(options.plugin_dirs.empty() ? default_plugin_dirs()
                                                      : options.plugin_dirs);
  zmq::context_t zctx(1);
  zmq::socket_t sock(zctx, zmq::socket_type::pair);
  sock.set(zmq::sockopt::linger, 0);
  sock.connect(options.endpoint);
  sock.send(zmq::buffer(wire::encode({{"op", "hello"},
                                      {"protocol", wire::kHostProtocolVersion},
                                      {"abi", SPINDLE_REWARD_ABI_VERSION},
                                      {"pid", getpid()}})),
            zmq::send_flags::none);
  for (;;) {
    zmq::message_t msg;
    if (!sock.recv(msg, zmq::recv_flags::none)) continue;
    json reply;
    bool stop = false;
    try {
      const json req = wire::decode(msg.data(), msg.size());
      const std::string op = req.at("op").get<std::string>();
      if (op == "list") {
        reply = handle_list(registry);
      } else if (op == "validate") {
        const spindle_reward_plugin& p = registry.get(req.at("plugin").get<std::string>());
        PluginContext ctx(p, config_text(req));
        reply = {{"ok", true}};
      } else if (op == "score") {
        reply = handle_score(registry, req);
      } else if (op == "shutdown") {
        reply = {{"ok", true}};
        stop = true;
      } else {
        reply = wire::error_reply(ErrorCode::invalid_argument, "unknown op '" + op + "'");
      }
    } catch (const Error& e) {
      reply = wire::error_reply(e.code(), e.what());
    } catch (const std::exception& e) {
      reply = wire::error_reply(ErrorCode::format, std::string("bad request: ") + e.what());
    }
    if (getpid() != self) _exit(0);  // a plugin's fork() returned here in the child
    contain(reply);
    sock.send(zmq::buffer(wire::encode(reply)), zmq::send_flags::none);
    if (stop) return 0;
  }
}

}  // namespace spindle::rewards
