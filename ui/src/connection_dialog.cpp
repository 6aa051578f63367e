#include "spindle/ui/connection_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

#include "spindle/protocol/curve.h"
#include "spindle/ui/local_daemon.h"

namespace spindle::ui {

ConnectionDialog::ConnectionDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle("Connect to spindled");
  saved_ = load_profiles();
  profiles_ = new QComboBox(this);
  profiles_->addItem(QStringLiteral("Local daemon (%1)").arg(local_daemon().data_dir));
  for (const auto& p : saved_) profiles_->addItem(p.name);
  profiles_->addItem("New remote connection...");
  name_ = new QLineEdit(this);
  endpoint_ = new QLineEdit(this);
  endpoint_->setPlaceholderText("tcp://cluster-head:7878");
  token_ = new QLineEdit(this);
  token_->setEchoMode(QLineEdit::Password);
  server_key_ = new QLineEdit(this);
  server_key_->setPlaceholderText("server.pub (Z85, 40 characters)");
  client_public_ = new QLineEdit(this);
  client_public_->setPlaceholderText("empty = an ephemeral key pair");
  client_secret_ = new QLineEdit(this);
  client_secret_->setEchoMode(QLineEdit::Password);
  auto* generate = new QPushButton("Generate key pair", this);
  connect(generate, &QPushButton::clicked, this, [this] {
    const auto pair = protocol::curve_keypair();
    client_public_->setText(QString::fromStdString(pair.public_key));
    client_secret_->setText(QString::fromStdString(pair.secret_key));
  });
  error_ = new QLabel(this);
  error_->setWordWrap(true);
  error_->setStyleSheet("color: #d9534f;");
  auto* form = new QFormLayout;
  form->addRow("Profile", profiles_);
  form->addRow("Name", name_);
  form->addRow("Endpoint", endpoint_);
  form->addRow("Token", token_);
  form->addRow("Server key", server_key_);
  form->addRow("Client public key", client_public_);
  form->addRow("Client secret key", client_secret_);
  form->addRow("", generate);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText("Connect");
  connect(buttons, &QDialogButtonBox::accepted, this, &ConnectionDialog::tryAccept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(error_);
  layout->addWidget(buttons);
  connect(profiles_, &QComboBox::currentIndexChanged, this, &ConnectionDialog::loadProfile);
  loadProfile(0);
}

bool ConnectionDialog::useLocal() const { return profiles_->currentIndex() == 0; }

void ConnectionDialog::loadProfile(int index) {
  const bool local = index == 0;
  for (QLineEdit* e : {name_, endpoint_, token_, server_key_, client_public_, client_secret_})
    e->setEnabled(!local);
  error_->clear();
  if (local) {
    const LocalDaemon d = local_daemon();
    name_->setText("local");
    endpoint_->setText(d.endpoint);
    token_->setText(d.token);
    return;
  }
  const int i = index - 1;
  const ConnectionProfile p = i < saved_.size() ? saved_[i] : ConnectionProfile{};
  name_->setText(p.name);
  endpoint_->setText(p.endpoint);
  token_->setText(p.token);
  server_key_->setText(p.server_key);
  client_public_->setText(p.client_public_key);
  client_secret_->setText(p.client_secret_key);
}

ConnectionProfile ConnectionDialog::profile() const {
  ConnectionProfile p;
  p.name = name_->text().trimmed();
  p.endpoint = endpoint_->text().trimmed();
  p.token = token_->text().trimmed();
  p.server_key = server_key_->text().trimmed();
  p.client_public_key = client_public_->text().trimmed();
  p.client_secret_key = client_secret_->text().trimmed();
  return p;
}

void ConnectionDialog::tryAccept() {
  if (useLocal()) return accept();
  const ConnectionProfile p = profile();
  const QString why = p.validate();
  if (!why.isEmpty()) {
    error_->setText(why);
    return;
  }
  upsert_profile(p);
  accept();
}

}  // namespace spindle::ui
