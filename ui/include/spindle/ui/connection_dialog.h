#pragma once
// "Connect to a daemon": the local daemon of the data dir, or a saved profile (TCP endpoint,
// CURVE server key, client key pair; connection_profiles.h), or a new one. A thin form over
// ConnectionProfile::validate(): a bad field is named inline, the dialog stays open.

#include <QDialog>

#include "spindle/ui/connection_profiles.h"

class QComboBox;
class QLabel;
class QLineEdit;

namespace spindle::ui {

class ConnectionDialog : public QDialog {
  Q_OBJECT
 public:
  explicit ConnectionDialog(QWidget* parent = nullptr);
  // The chosen profile (after accept()); name "local" = the local daemon.
  ConnectionProfile profile() const;
  bool useLocal() const;

 private:
  void loadProfile(int index);
  void tryAccept();

  QComboBox* profiles_;
  QLineEdit* name_;
  QLineEdit* endpoint_;
  QLineEdit* token_;
  QLineEdit* server_key_;
  QLineEdit* client_public_;
  QLineEdit* client_secret_;
  QLabel* error_;
  QList<ConnectionProfile> saved_;
};

}  // namespace spindle::ui
