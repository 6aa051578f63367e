#pragma once
// Saved connections to remote daemons (QSettings group "connections"): a name, a TCP endpoint,
// the server's CURVE public key, and this client's key pair (Z85). The local daemon of the data
// dir is not a profile: the Studio always offers it first.
//
// Secret keys are stored like the rest of QSettings (the user's config file, mode of the
// user's umask); the CLI keeps its own pair in a 0600 file instead (decisions.md).

#include <QList>
#include <QString>

#include "spindle/protocol/client.h"

namespace spindle::ui {

struct ConnectionProfile {
  QString name;
  QString endpoint;  // tcp://host:port (CURVE) or ipc://path
  QString token;
  QString server_key;         // Z85, 40 chars; "" for ipc
  QString client_public_key;  // "" = an ephemeral pair per connection
  QString client_secret_key;
  protocol::ClientOptions options() const;
  // "" when usable, else what is wrong ("endpoint: must start with tcp:// or ipc://", ...).
  QString validate() const;
};

QList<ConnectionProfile> load_profiles();
void save_profiles(const QList<ConnectionProfile>& profiles);
// Adds or replaces (by name) and saves.
void upsert_profile(const ConnectionProfile& profile);

}  // namespace spindle::ui
