#include "setup.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "spindle/adapters/sha256.h"
#include "spindle/catalog/catalog.h"
#include "spindle/adapters/base_checksum.h"
#include "spindle/catalog/data_dir.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/protocol/curve.h"

extern char** environ;

namespace spindle::service {

namespace fs = std::filesystem;

namespace {

// Writes `text` to `path` atomically, 0600 from its creation: the temp file is made by
// mkostemp (0600) and renamed over `path`, so no other user can open the secret at any moment
// (write_file_atomic publishes 0644 files, and a later chmod would leave a window in which an
// open(2) by anyone succeeds and keeps reading).
void write_private(const fs::path& path, const std::string& text) {
  std::string tmpl =
      (path.parent_path() / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  SPINDLE_CHECK(fd >= 0, io, "{}: cannot create a temp file: {}", path.string(), std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  const int err = done != text.size() ? (errno != 0 ? errno : EIO) : ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  if (err != 0 || ::rename(tmpl.c_str(), path.c_str()) != 0) {
    const int e = err != 0 ? err : errno;
    ::unlink(tmpl.c_str());
    throw Error(e == ENOSPC || e == EDQUOT ? ErrorCode::resource : ErrorCode::io,
                fmt::format("{}: cannot write: {}", path.string(), std::strerror(e)));
  }
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);  // the rename survives a crash
    ::close(dfd);
  }
}

}  // namespace

Paths resolve_paths(const ServiceConfig& c) {
  Paths p;
  p.data_dir = fs::absolute(catalog::resolve_data_dir(c.data_dir));
  p.curve_dir = p.data_dir / "curve";
  // The data dir holds the catalog, blobs, tokens, keys and sockets: the owner's only (0700),
  // or 0750 with --group-access so the daemon's group can reach the sockets. Set on every
  // start, so a dir made by an older version (0755) is closed too. Keys and logs: 0700.
  const fs::perms owner = fs::perms::owner_all;
  const fs::perms data_mode =
      c.group_access ? owner | fs::perms::group_read | fs::perms::group_exec : owner;
  for (const auto& [dir, mode] : {std::pair{p.data_dir, data_mode}, std::pair{p.curve_dir, owner},
                                  std::pair{p.data_dir / "logs", owner}}) {
    fs::create_directories(dir);
    std::error_code ec;
    fs::permissions(dir, mode, fs::perm_options::replace, ec);
    SPINDLE_CHECK(!ec, io, "{}: cannot set its mode to {:o}: {}", dir.string(), int(mode),
                  ec.message());
  }
  p.ipc = c.ipc.empty() ? "ipc://" + (p.data_dir / "spindled.sock").string() : c.ipc;
  p.pub = c.pub.empty() ? "ipc://" + (p.data_dir / "spindled-events.sock").string() : c.pub;
  // The PUB socket has no CURVE and no tokens: on TCP anyone on the network would read every
  // tenant's residency and metrics. Remote clients use the authenticated subscribe op.
  SPINDLE_CHECK(p.pub.starts_with("ipc://"), invalid_argument,
                "--pub {}: expected ipc://PATH (the PUB socket is unauthenticated, so it is local "
                "only; remote clients subscribe to events over the CURVE socket)",
                p.pub);
  p.tcp = c.tcp;
  SPINDLE_CHECK(p.tcp.empty() || p.tcp.starts_with("tcp://"), invalid_argument,
                "--tcp {}: expected tcp://HOST:PORT", p.tcp);
  p.tokens_file = c.tokens_file.empty() ? p.data_dir / "tokens.json" : fs::path(c.tokens_file);
  p.authorized_clients = c.authorized_clients.empty() ? p.curve_dir / "authorized_clients"
                                                      : fs::path(c.authorized_clients);
  p.log_file = p.data_dir / "logs" / "spindled.log";
  return p;
}

std::shared_ptr<spdlog::logger> make_logger(const Paths& paths, const std::string& level) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(paths.log_file.string());
  auto log = std::make_shared<spdlog::logger>("spindled", spdlog::sinks_init_list{console, file});
  const auto lvl = spdlog::level::from_str(level);
  SPINDLE_CHECK(lvl != spdlog::level::off || level == "off", invalid_argument,
                "--log-level {}: expected trace, debug, info, warn, error or off", level);
  log->set_level(lvl);
  log->flush_on(spdlog::level::trace);  // refusals must be in the file when a test reads it
  return log;
}

std::vector<fs::path> resolve_models(const ServiceConfig& c, const Paths& paths,
                                     spdlog::logger& log) {
  SPINDLE_CHECK(c.tokenizers.size() <= std::max<size_t>(c.models.size(), 1), invalid_argument,
                "{} --tokenizer values for {} --model: each --tokenizer pairs with the --model "
                "at its position", c.tokenizers.size(), c.models.size());
  SPINDLE_CHECK(c.base_ids.size() <= std::max<size_t>(c.models.size(), 1), invalid_argument,
                "{} --base-id values for {} --model: each --base-id pairs with the --model at "
                "its position", c.base_ids.size(), c.models.size());
  if (c.models.empty()) return {resolve_default_model(paths, log)};
  std::vector<fs::path> out;
  for (const std::string& m : c.models) {
    SPINDLE_CHECK(fs::exists(m), not_found, "--model {}: no such file or directory", m);
    out.push_back(fs::absolute(m));
  }
  return out;
}

std::string default_base_id(const fs::path& model) {
  fs::path p = model.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (fs::is_directory(p) && fs::exists(p / "config.json")) {
    // A hub id (org/name) recorded by save_pretrained; a path recorded there is not an id.
    const nlohmann::json j = nlohmann::json::parse(read_file_to_string(p / "config.json"), nullptr, false);
    if (j.is_object() && j.contains("_name_or_path") && j["_name_or_path"].is_string()) {
      const std::string name = j["_name_or_path"].get<std::string>();
      bool ok = !name.empty() && name.front() != '.' && name.front() != '~' &&
                name.find('\\') == std::string::npos;
      if (ok) {
        try {
          catalog::check_base_id(name);
        } catch (const Error&) {
          ok = false;
        }
      }
      if (ok) return name;
    }
  }
  return fs::is_directory(p) ? p.filename().string() : p.stem().string();
}

TokenizerConfig read_tokenizer_config(const fs::path& model_path, const engine::Tokenizer* tok) {
  TokenizerConfig out;
  const fs::path dir = fs::is_directory(model_path) ? model_path : model_path.parent_path();
  const fs::path file = dir / "tokenizer_config.json";
  if (tok) out.add_bos_token = std::string_view(tok->kind()) == "llama2c";
  if (!fs::exists(file)) return out;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file_to_string(file));
  } catch (const nlohmann::json::exception& e) {
    SPINDLE_THROW(format, "{}: not JSON: {}", file.string(), e.what());
  }
  SPINDLE_CHECK(j.is_object(), format, "{}: expected a JSON object", file.string());
  if (const auto it = j.find("chat_template"); it != j.end()) {
    if (it->is_string()) {
      out.chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
      for (const auto& e : *it) {
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string()) {
          out.chat_template = e["template"].get<std::string>();
        }
      }
    } else if (!it->is_null()) {
      SPINDLE_THROW(format, "{}: chat_template must be a string or a list of {{name, template}}",
                    file.string());
    }
  }
  // pad_token: a string or {"content": ...} (AddedToken form).
  if (const auto it = j.find("pad_token"); it != j.end() && tok) {
    std::string text;
    if (it->is_string()) text = it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      text = (*it)["content"].get<std::string>();
    if (!text.empty()) out.pad_token = tok->token_id(text);
  }
  if (const auto it = j.find("add_bos_token"); it != j.end() && it->is_boolean())
    out.add_bos_token = it->get<bool>();
  return out;
}

fs::path resolve_default_model(const Paths& paths, spdlog::logger& log) {
  const fs::path dir = paths.data_dir / "bases" / "arith";
  if (fs::exists(dir / "config.json")) return dir;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  SPINDLE_CHECK(!ec, io, "cannot read /proc/self/exe: {}", ec.message());
  const fs::path spindle = self.parent_path() / "spindle";
  SPINDLE_CHECK(fs::exists(spindle), not_found,
                "no --model given and {} is missing; building it needs {} (or pass --model)",
                dir.string(), spindle.string());
  log.info("no --model: building the default base {} with `spindle make-base` (minutes)",
           dir.string());
  const std::string out = dir.string();
  std::vector<std::string> args = {spindle.string(), "make-base", "--task", "arithmetic", "--out", out};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, spindle.c_str(), nullptr, nullptr, argv.data(), environ);
  SPINDLE_CHECK(rc == 0, io, "cannot start {}: {}", spindle.string(), std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  SPINDLE_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, internal,
                "`spindle make-base --out {}` failed (status {})", out, status);
  return dir;
}

void register_base(const Paths& paths, const std::string& base_id, const fs::path& model_path,
                   const engine::ModelConfig& config, spdlog::logger& log) {
  catalog::check_base_id(base_id);
  catalog::Catalog cat(paths.data_dir);
  try {
    const catalog::BaseModel b = cat.get_base(base_id);
    if (!b.path.empty() && fs::path(b.path) != model_path) {
      log.warn("base '{}' is registered with path {}; serving {}", base_id, b.path,
               model_path.string());
    }
    return;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
  }
  catalog::BaseModel base;
  base.id = base_id;
  base.arch = engine::arch_name(config.arch);
  base.path = model_path.string();
  base.checksum = adapters::base_checksum(model_path);
  cat.register_base(base, "spindled");
  log.info("registered base model {} (arch {}, path {})", base_id, base.arch, base.path);
}

std::map<std::string, std::string> load_or_create_tokens(const Paths& paths, spdlog::logger& log) {
  std::map<std::string, std::string> tokens;
  if (!fs::exists(paths.tokens_file)) {
    std::random_device rd;
    std::string token;
    for (int i = 0; i < 32; ++i) token += fmt::format("{:02x}", rd() & 0xffu);
    const nlohmann::json j = nlohmann::json::array({{{"token", token}, {"tenant", "local"}}});
    write_private(paths.tokens_file, j.dump(2) + "\n");
    write_private(paths.data_dir / "token", token + "\n");
    log.info("created {} with a token for tenant 'local' (also in {})",
             paths.tokens_file.string(), (paths.data_dir / "token").string());
  }
  const std::string text = read_file_to_string(paths.tokens_file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    SPINDLE_THROW(format, "{}: not JSON: {}", paths.tokens_file.string(), e.what());
  }
  SPINDLE_CHECK(j.is_array(), format, "{}: expected [{{\"token\": ..., \"tenant\": ...}}, ...]",
                paths.tokens_file.string());
  for (const auto& e : j) {
    SPINDLE_CHECK(e.is_object() && e.contains("token") && e.contains("tenant") &&
                      e["token"].is_string() && e["tenant"].is_string(),
                  format, "{}: every entry needs string fields token and tenant",
                  paths.tokens_file.string());
    const std::string token = e["token"], tenant = e["tenant"];
    SPINDLE_CHECK(token.size() >= 16, format, "{}: a token shorter than 16 characters (tenant {})",
                  paths.tokens_file.string(), tenant);
    catalog::check_name("tenant", tenant);
    tokens[token] = tenant;
  }
  log.info("{} token(s) from {}", tokens.size(), paths.tokens_file.string());
  return tokens;
}

std::pair<std::string, std::string> load_or_create_server_keys(const Paths& paths) {
  try {
    const protocol::CurveKeyPair keys = protocol::load_or_create_keypair(paths.curve_dir, "server");
    return {keys.public_key, keys.secret_key};
  } catch (const std::runtime_error& e) {
    SPINDLE_THROW(format, "CURVE server keys: {}", e.what());
  }
}

std::vector<std::string> read_authorized_keys(const fs::path& file) {
  if (!fs::exists(file)) return {};
  try {
    return protocol::read_public_keys(file);
  } catch (const std::runtime_error& e) {
    SPINDLE_THROW(format, "{}", e.what());
  }
}

}  // namespace spindle::service
