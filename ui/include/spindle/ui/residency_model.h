#pragma once
// The state behind the Residency panel (DESIGN.md "Residency is separate from addressability"):
// the daemon's device slots, host cache, cold-load queue and hit rates, and a tokens/s history.
//
// Sources: `status` polled every poll_ms while the model is active (start()/stop()), and the
// `residency` events of the connection's event stream (placements restricted to this tenant by
// the server). Both carry a StatusReply; the newest wins. The GUI thread never waits: a poll is
// skipped while the previous one is in flight.

#include <QObject>
#include <QString>
#include <QTimer>
#include <QVector>

#include "spindle/protocol/messages.h"

namespace spindle::ui {

class Connection;

// One device slot of the serving pool as the panel draws it.
struct SlotCell {
  int slot = 0;
  QString revision;  // "" = free
  bool in_use = false;
  bool loading = false;
};

class ResidencyModel : public QObject {
  Q_OBJECT
 public:
  explicit ResidencyModel(Connection* connection, QObject* parent = nullptr);

  void start(int poll_ms = 500);
  void stop();

  // Applies a status snapshot (poll reply or event); public for tests.
  void apply(const protocol::StatusReply& status);

  const protocol::StatusReply& status() const { return status_; }
  bool hasStatus() const { return has_status_; }
  // device_slots cells in slot order; placements on the device fill theirs, loading ones are
  // marked on the slot they will take (or on none when the server gave no slot).
  QVector<SlotCell> slotCells() const;
  int loadingCount() const;    // placements in tier "loading"
  int hostCachedCount() const; // placements in tier "host"
  double hostCacheFill() const;  // bytes / capacity, 0..1
  // tokens/s samples, oldest first, at most kHistory.
  const QVector<float>& tokensHistory() const { return history_; }
  QString lastError() const { return error_; }
  static constexpr int kHistory = 120;

 signals:
  void changed();
  void error(QString message);

 private:
  void poll();

  Connection* connection_;
  QTimer timer_;
  bool polling_ = false;
  bool has_status_ = false;
  protocol::StatusReply status_;
  QVector<float> history_;
  QString error_;
};

}  // namespace spindle::ui
