// Connection helpers of the CLI's remote commands (see remote.h).

#include "spindle/protocol/data_dir.h"
#include "remote.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "spindle/catalog/data_dir.h"
#include "spindle/core/error.h"
#include "spindle/engine/lora.h"
#include "spindle/protocol/curve.h"

namespace spindle::cli {

namespace fs = std::filesystem;

namespace {

std::string first_word_of_file(const fs::path& p) {
  std::ifstream in(p);
  std::string w;
  in >> w;
  return w;
}

}  // namespace

void add_remote_options(CLI::App& cmd, RemoteOptions& o, bool with_data_dir) {
  cmd.add_option("--endpoint", o.endpoint,
                 "spindled endpoint (default: $SPINDLE_ENDPOINT, else ipc://<data-dir>/spindled.sock)");
  cmd.add_option("--token", o.token, "API token (default: $SPINDLE_TOKEN, else <data-dir>/token)");
  cmd.add_option("--server-key", o.server_key,
                 "server's CURVE public key (Z85, or a file holding it) for tcp:// endpoints");
  cmd.add_option("--client-keys", o.client_keys,
                 "directory of this client's CURVE key pair (client.key/.pub, created if missing)");
  if (with_data_dir) {
    cmd.add_option("--data-dir", o.data_dir,
                   "the daemon's data directory (default: $SPINDLE_DATA_DIR, "
                   "$XDG_DATA_HOME/spindle or ~/.local/share/spindle)");
  }
}

std::unique_ptr<protocol::Client> connect_remote(const RemoteOptions& o) {
  protocol::ClientOptions c;
  c.client_name = "spindle-cli";
  c.endpoint = o.endpoint;
  if (c.endpoint.empty()) {
    if (const char* e = std::getenv("SPINDLE_ENDPOINT"); e && *e) c.endpoint = e;
  }
  // The user's own daemon, else the system daemon (protocol::client_data_dir).
  const fs::path dir = protocol::client_data_dir(o.data_dir);
  if (c.endpoint.empty()) c.endpoint = "ipc://" + (dir / "spindled.sock").string();
  c.token = o.token;
  if (c.token.empty()) {
    if (const char* t = std::getenv("SPINDLE_TOKEN"); t && *t) c.token = t;
  }
  if (c.token.empty()) {
    const fs::path token_file = dir / "token";
    c.token = first_word_of_file(token_file);
    SPINDLE_CHECK(!c.token.empty(), not_found,
                  "no token: pass --token, set SPINDLE_TOKEN, or run spindled once so it writes {}",
                  token_file.string());
  }
  if (!o.server_key.empty()) {
    c.server_public_key =
        protocol::is_z85_key(o.server_key) ? o.server_key : first_word_of_file(o.server_key);
    SPINDLE_CHECK(protocol::is_z85_key(c.server_public_key), invalid_argument,
                  "--server-key {}: not a Z85 CURVE public key (40 characters) or a file holding one",
                  o.server_key);
    if (!o.client_keys.empty()) {
      const auto pair = protocol::load_or_create_keypair(o.client_keys, "client");
      c.client_public_key = pair.public_key;
      c.client_secret_key = pair.secret_key;
    }
  }
  c.timeout_ms = 3600 * 1000;  // long requests (sampling many tokens) reply when done
  try {
    // The handshake is bounded separately: a daemon that is not running never answers.
    protocol::ClientOptions probe = c;
    probe.timeout_ms = 10000;
    auto client = std::make_unique<protocol::Client>(probe);
    return std::make_unique<protocol::Client>(c);
  } catch (const protocol::ClientError& e) {
    if (e.code() == "timeout" || e.code() == "transport") {
      SPINDLE_THROW(not_found, "no spindled answered at {} ({}); start it with `spindled` or "
                    "`spindle serve`, or pass --endpoint", c.endpoint, e.what());
    }
    SPINDLE_THROW(invalid_argument, "spindled at {} refused the connection: {}", c.endpoint,
                  e.what());
  }
}

catalog::Policy to_catalog(const protocol::PolicyInfo& p) {
  catalog::Policy out;
  out.tenant = p.tenant;
  out.name = p.name;
  out.base_id = p.base_id;
  out.lora.rank = p.rank;
  out.lora.alpha = p.alpha;
  for (const auto& t : p.targets) {
    if (auto target = engine::lora_target_from_name(t)) out.lora.targets.push_back(*target);
  }
  if (!p.head.empty()) out.head = p.head;
  if (!p.forked_from.empty()) out.forked_from = p.forked_from;
  out.tags = p.tags;
  out.description = p.description;
  out.created_ms = p.created_ms;
  out.updated_ms = p.updated_ms;
  out.user_metadata_json = p.user_metadata_json;
  return out;
}

catalog::Revision to_catalog(const protocol::RevisionInfo& r) {
  catalog::Revision out;
  out.id = r.id;
  out.policy = r.policy;
  if (!r.parent.empty()) out.parent = r.parent;
  out.step = r.step;
  out.blob = r.blob;
  out.bytes = r.bytes;
  out.metrics_json = r.metrics_json.empty() ? "{}" : r.metrics_json;
  out.created_ms = r.created_ms;
  out.expires_ms = r.expires_ms;
  out.expired = r.expired;
  return out;
}

}  // namespace spindle::cli
