#pragma once
// Tenant-scoped events from spindled (PROTOCOL.md "subscribe"): GRPO run metrics and adapter
// residency, on a second DEALER socket owned by a thread of its own (STYLE.md 6), so a burst of
// events never delays a request's reply and vice versa.
//
// The stream sends one `subscribe` request and reads its EventReply messages. When the stream
// ends (daemon stopped, connection lost, error reply) it reconnects every `retry_ms` and emits
// resubscribed() once live again: a run view then catches up with `run_status`, because events
// sent while it was away are gone (events are best-effort, PROTOCOL.md section 9).
//
// Threading: start()/stop() and every signal are on the GUI thread (the worker hands each event
// over with a queued call, then the signal is emitted directly).

#include <QObject>
#include <QString>

#include "spindle/protocol/client.h"

class QThread;

namespace spindle::ui {

class EventWorker;

class EventStream : public QObject {
  Q_OBJECT
 public:
  explicit EventStream(QObject* parent = nullptr);
  ~EventStream() override;

  void start(const protocol::ClientOptions& options, int retry_ms = 2000);
  void stop();
  bool isLive() const { return live_; }
  quint64 eventsReceived() const { return received_; }

  // For the worker (queued onto the GUI thread).
  void handleEvent(const protocol::EventReply& event);
  void handleState(bool live, const QString& why);

 signals:
  void subscribed();    // the first time the stream is live
  void resubscribed();  // live again after a loss
  void lost(QString why);
  void metrics(const spindle::protocol::RunStatusReply& run);
  void residency(const spindle::protocol::StatusReply& status);

 private:
  QThread* thread_ = nullptr;
  EventWorker* worker_ = nullptr;
  bool live_ = false;
  bool was_live_ = false;
  quint64 received_ = 0;
};

}  // namespace spindle::ui
