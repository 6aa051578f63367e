#include "spindle/ui/connection_profiles.h"

#include <QSettings>

#include "spindle/protocol/curve.h"

namespace spindle::ui {

protocol::ClientOptions ConnectionProfile::options() const {
  protocol::ClientOptions o;
  o.endpoint = endpoint.toStdString();
  o.token = token.toStdString();
  o.server_public_key = server_key.toStdString();
  o.client_public_key = client_public_key.toStdString();
  o.client_secret_key = client_secret_key.toStdString();
  o.client_name = "spindle-studio";
  o.timeout_ms = 3600 * 1000;
  return o;
}

QString ConnectionProfile::validate() const {
  if (name.trimmed().isEmpty()) return "name: must not be empty";
  if (!endpoint.startsWith("tcp://") && !endpoint.startsWith("ipc://"))
    return "endpoint: must start with tcp:// or ipc://";
  if (token.isEmpty()) return "token: must not be empty";
  if (endpoint.startsWith("tcp://")) {
    if (!protocol::is_z85_key(server_key.toStdString()))
      return "server key: a TCP endpoint needs the server's CURVE public key (Z85, 40 characters)";
  }
  if (!client_public_key.isEmpty() && !protocol::is_z85_key(client_public_key.toStdString()))
    return "client public key: not a Z85 key (40 characters)";
  if (!client_secret_key.isEmpty() && !protocol::is_z85_key(client_secret_key.toStdString()))
    return "client secret key: not a Z85 key (40 characters)";
  if (client_public_key.isEmpty() != client_secret_key.isEmpty())
    return "client keys: give both the public and the secret key, or neither (ephemeral pair)";
  return {};
}

QList<ConnectionProfile> load_profiles() {
  QSettings s;
  QList<ConnectionProfile> out;
  const int n = s.beginReadArray("connections");
  for (int i = 0; i < n; ++i) {
    s.setArrayIndex(i);
    ConnectionProfile p;
    p.name = s.value("name").toString();
    p.endpoint = s.value("endpoint").toString();
    p.token = s.value("token").toString();
    p.server_key = s.value("server_key").toString();
    p.client_public_key = s.value("client_public_key").toString();
    p.client_secret_key = s.value("client_secret_key").toString();
    out << p;
  }
  s.endArray();
  return out;
}

void save_profiles(const QList<ConnectionProfile>& profiles) {
  QSettings s;
  s.beginWriteArray("connections", int(profiles.size()));
  for (int i = 0; i < profiles.size(); ++i) {
    s.setArrayIndex(i);
    const ConnectionProfile& p = profiles[i];
    s.setValue("name", p.name);
    s.setValue("endpoint", p.endpoint);
    s.setValue("token", p.token);
    s.setValue("server_key", p.server_key);
    s.setValue("client_public_key", p.client_public_key);
    s.setValue("client_secret_key", p.client_secret_key);
  }
  s.endArray();
  s.sync();
}

void upsert_profile(const ConnectionProfile& profile) {
  QList<ConnectionProfile> all = load_profiles();
  bool replaced = false;
  for (auto& p : all) {
    if (p.name == profile.name) {
      p = profile;
      replaced = true;
    }
  }
  if (!replaced) all << profile;
  save_profiles(all);
}

}  // namespace spindle::ui
