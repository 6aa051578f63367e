#pragma once
// The Studio's link to spindled (DESIGN.md "Studio"): the request socket on a thread of its own.
//
// Threading (STYLE.md 6, one thread owns each ZeroMQ socket): a Connection lives on the GUI
// thread and owns a QThread on which a protocol::Client (one DEALER socket) lives. post() may
// be called from the GUI thread only; it never blocks. The request is sent from the request
// thread; every reply (one, or each message of a stream until its final one) is handed to the
// handler on `context`'s thread through a queued call, so models and widgets never wait on the
// network. A handler whose context object has been destroyed is dropped.
//
// Errors: an error reply reaches the handler as a Reply with ok == false (error.code and
// error.message are the server's); `requestFailed` is emitted as well, for the status bar's
// log. `overloaded` replies are retried on the request thread after retry_after_ms (up to
// ClientOptions::max_overloaded_retries), so handlers never see them unless retries run out.
// A request with no reply within ClientOptions::timeout_ms is answered locally with code
// "timeout" (streams are exempt). Nothing here opens a modal dialog.

#include <QObject>
#include <QString>

#include <functional>
#include <memory>

#include "spindle/protocol/client.h"

class QThread;

namespace spindle::ui {

class RequestWorker;
class EventStream;

class Connection : public QObject {
  Q_OBJECT
 public:
  using Handler = std::function<void(const protocol::Reply&)>;

  explicit Connection(QObject* parent = nullptr);
  ~Connection() override;  // closes the socket and joins the thread

  // Connects and handshakes on the request thread, then starts the event stream (a second
  // socket and thread, see event_stream.h). Emits opened() or openFailed(). Calling it again
  // replaces the previous connection (in-flight requests get a "cancelled" error).
  void open(const protocol::ClientOptions& options);
  void close();

  bool isOpen() const { return open_; }
  QString endpoint() const { return endpoint_; }
  QString tenant() const { return tenant_; }
  QString serverVersion() const { return server_version_; }
  const protocol::ClientOptions& options() const { return options_; }

  // Sends `op` with `body` and `frames`; `handler` runs on `context`'s thread for every reply
  // (see above). Before open() succeeded, the handler gets an error reply with code
  // "unavailable". Returns a local request number (> 0), unique per Connection.
  quint64 post(QObject* context, protocol::Op op, protocol::RequestBody body,
               protocol::Frames frames, Handler handler);
  quint64 post(QObject* context, protocol::Op op, protocol::RequestBody body, Handler handler) {
    return post(context, op, std::move(body), {}, std::move(handler));
  }

  // Tenant-scoped events (metrics, residency) of this connection; never null.
  EventStream* events() const { return events_; }

  // Requests sent and replies received so far (tests and the bench read them).
  quint64 requestsSent() const { return sent_; }

 signals:
  void opened();
  void openFailed(QString code, QString message);
  void requestFailed(QString op, QString code, QString message);

 private:
  friend class RequestWorker;
  void onOpened(QString endpoint, QString tenant, QString server_version);
  void onOpenFailed(QString code, QString message);

  QThread* thread_ = nullptr;
  RequestWorker* worker_ = nullptr;  // lives on thread_
  EventStream* events_ = nullptr;
  protocol::ClientOptions options_;
  bool open_ = false;
  quint64 next_ = 1;
  quint64 sent_ = 0;
  QString endpoint_, tenant_, server_version_;
};

// The reply's error as one line, "code: message" ("" when ok).
QString errorText(const protocol::Reply& reply);

}  // namespace spindle::ui
