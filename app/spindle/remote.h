#pragma once
// The CLI's connection to a running spindled (the protocol client library), shared by
// `spindle status`, `spindle sample` and `spindle catalog --endpoint`.
//
// Endpoint: --endpoint, else $SPINDLE_ENDPOINT, else ipc://<data dir>/spindled.sock.
// Token: --token, else $SPINDLE_TOKEN, else the file <data dir>/token that spindled writes.
// TCP endpoints need --server-key (the server's Z85 public key, or a file holding it, e.g.
// <data dir>/curve/server.pub) and a client key pair: --client-keys DIR (client.key/.pub,
// created there on first use; the public key must be on the server's allow-list).

#include <memory>
#include <string>

#include "spindle/catalog/types.h"
#include "spindle/protocol/client.h"

namespace CLI {
class App;
}

namespace spindle::cli {

struct RemoteOptions {
  std::string endpoint;
  std::string token;
  std::string data_dir;
  std::string server_key;
  std::string client_keys;
};

// Adds --endpoint, --token, --server-key, --client-keys (and --data-dir unless `with_data_dir`
// is false because the command already has one bound to options.data_dir).
void add_remote_options(CLI::App& cmd, RemoteOptions& options, bool with_data_dir = true);

// Connects and handshakes; throws spindle::Error naming the endpoint when the daemon does not
// answer (with a hint to start it), or the server's error for a bad token.
std::unique_ptr<protocol::Client> connect_remote(const RemoteOptions& options);

// Wire structs -> catalog types, so remote results print exactly like local ones.
catalog::Policy to_catalog(const protocol::PolicyInfo& p);
catalog::Revision to_catalog(const protocol::RevisionInfo& r);

}  // namespace spindle::cli
