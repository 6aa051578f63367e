#pragma once
// The request thread's side of Connection (connection.h): owns the protocol::Client and every
// request in flight. Private to spindle_ui.
//
// Threading: every method runs on the worker's thread (Connection invokes them queued); the
// only thing that crosses back is Connection::deliver, invoked queued on the GUI thread.

#include <QObject>
#include <QPointer>
#include <QTimer>

#include <chrono>
#include <memory>
#include <unordered_map>

#include "spindle/ui/connection.h"

namespace spindle::ui {

struct PendingRequest {
  quint64 local = 0;
  QPointer<QObject> context;  // read on the GUI thread only
  protocol::Op op = protocol::Op::status;
  protocol::RequestBody body;
  protocol::Frames frames;
  Connection::Handler handler;
  int attempts = 0;
  std::chrono::steady_clock::time_point deadline;
};

class RequestWorker : public QObject {
  Q_OBJECT
 public:
  explicit RequestWorker(Connection* owner) : owner_(owner) {}

  void open(protocol::ClientOptions options);
  void submit(std::shared_ptr<PendingRequest> request);
  void shutdown();  // fails what is in flight with "cancelled", closes the socket

 private:
  void send(const std::shared_ptr<PendingRequest>& request);
  void poll();
  void fail(const std::shared_ptr<PendingRequest>& request, const char* code, const QString& message);
  void deliver(const std::shared_ptr<PendingRequest>& request, protocol::Reply reply);
  void arm();

  Connection* owner_;
  std::unique_ptr<protocol::Client> client_;
  protocol::ClientOptions options_;
  std::unordered_map<uint64_t, std::shared_ptr<PendingRequest>> in_flight_;  // by wire id
  QTimer* timer_ = nullptr;
};

}  // namespace spindle::ui
