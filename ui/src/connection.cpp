#include "spindle/ui/connection.h"

#include <QThread>

#include "request_worker.h"
#include "spindle/ui/event_stream.h"

namespace spindle::ui {

using namespace protocol;
using Clock = std::chrono::steady_clock;

namespace {

Reply local_error(Op op, const char* code, const QString& message) {
  Reply r;
  r.op = op;
  r.ok = false;
  r.error.code = code;
  r.error.message = message.toStdString();
  return r;
}

// Hands `reply` to the request's handler on the GUI thread (Connection's thread).
void post_to_gui(Connection* owner, std::shared_ptr<PendingRequest> request, Reply reply) {
  auto shared = std::make_shared<const Reply>(std::move(reply));
  QMetaObject::invokeMethod(
      owner,
      [owner, request, shared] {
        if (!shared->ok && shared->error.code != "cancelled") {
          emit owner->requestFailed(op_name(request->op), QString::fromStdString(shared->error.code),
                                    QString::fromStdString(shared->error.message));
        }
        if (request->context && request->handler) request->handler(*shared);
      },
      Qt::QueuedConnection);
}

}  // namespace

QString errorText(const Reply& reply) {
  if (reply.ok) return {};
  return QString::fromStdString(reply.error.code + ": " + reply.error.message);
}

// ---- RequestWorker (request thread) --------------------------------------------------------

void RequestWorker::open(ClientOptions options) {
  shutdown();
  options_ = options;
  if (!timer_) {
    timer_ = new QTimer(this);
    timer_->setInterval(1);
    connect(timer_, &QTimer::timeout, this, &RequestWorker::poll);
  }
  try {
    // The handshake is bounded: a daemon that is not running never answers.
    ClientOptions o = options;
    o.timeout_ms = std::min(o.timeout_ms, 5000);
    auto client = std::make_unique<Client>(o);
    const HandshakeReply h = client->server();
    client_ = std::move(client);
    QMetaObject::invokeMethod(owner_, [o = owner_, e = QString::fromStdString(options.endpoint),
                                       t = QString::fromStdString(h.tenant),
                                       v = QString::fromStdString(h.server_version)] {
      o->onOpened(e, t, v);
    }, Qt::QueuedConnection);
  } catch (const ClientError& e) {
    QMetaObject::invokeMethod(owner_, [o = owner_, c = QString::fromStdString(e.code()),
                                       m = QString::fromUtf8(e.what())] { o->onOpenFailed(c, m); },
                              Qt::QueuedConnection);
  }
}

void RequestWorker::submit(std::shared_ptr<PendingRequest> request) {
  if (!client_) return fail(request, errc::unavailable, "not connected to a daemon");
  request->deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  send(request);
}

void RequestWorker::send(const std::shared_ptr<PendingRequest>& request) {
  try {
    const uint64_t id = client_->send(request->op, request->body, request->frames);
    in_flight_[id] = request;
    arm();
  } catch (const ClientError& e) {
    fail(request, e.code().c_str(), QString::fromUtf8(e.what()));
  }
}

void RequestWorker::arm() {
  if (!in_flight_.empty() && !timer_->isActive()) timer_->start();
  if (in_flight_.empty()) timer_->stop();
}

void RequestWorker::poll() {
  if (!client_) return;
  try {
    for (int i = 0; i < 256; ++i) {
      std::optional<Reply> r = client_->receive(0);
      if (!r) break;
      auto it = in_flight_.find(r->request_id);
      if (it == in_flight_.end()) continue;
      std::shared_ptr<PendingRequest> request = it->second;
      const bool final = is_final_reply(*r);
      if (final) in_flight_.erase(it);
      if (!r->ok && r->error.code == errc::overloaded &&
          request->attempts < options_.max_overloaded_retries) {
        ++request->attempts;
        const int wait = int(std::max<uint32_t>(1, r->error.retry_after_ms));
        QTimer::singleShot(wait, this, [this, request] {
          if (client_) send(request);
        });
        continue;
      }
      deliver(request, std::move(*r));
    }
  } catch (const ClientError& e) {
    // A malformed reply: its request (when known) fails; the others carry on.
    if (auto it = in_flight_.find(e.request_id()); it != in_flight_.end()) {
      auto request = it->second;
      in_flight_.erase(it);
      fail(request, e.code().c_str(), QString::fromUtf8(e.what()));
    }
  }
  const auto now = Clock::now();
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (!is_stream_op(it->second->op) && now > it->second->deadline) {
      auto request = it->second;
      it = in_flight_.erase(it);
      fail(request, "timeout",
           QStringLiteral("no reply to %1 within %2 ms").arg(op_name(request->op)).arg(options_.timeout_ms));
    } else {
      ++it;
    }
  }
  arm();
}

void RequestWorker::fail(const std::shared_ptr<PendingRequest>& request, const char* code,
                         const QString& message) {
  deliver(request, local_error(request->op, code, message));
}

void RequestWorker::deliver(const std::shared_ptr<PendingRequest>& request, Reply reply) {
  post_to_gui(owner_, request, std::move(reply));
}

void RequestWorker::shutdown() {
  auto pending = std::move(in_flight_);
  in_flight_.clear();
  for (auto& [id, request] : pending) fail(request, "cancelled", "connection closed");
  client_.reset();
  if (timer_) timer_->stop();
}

// ---- Connection (GUI thread) ---------------------------------------------------------------

Connection::Connection(QObject* parent) : QObject(parent) {
  thread_ = new QThread(this);
  thread_->setObjectName("spindle-requests");
  worker_ = new RequestWorker(this);
  worker_->moveToThread(thread_);
  connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
  thread_->start();
  events_ = new EventStream(this);
}

Connection::~Connection() {
  delete events_;
  events_ = nullptr;
  QMetaObject::invokeMethod(worker_, [w = worker_] { w->shutdown(); }, Qt::BlockingQueuedConnection);
  thread_->quit();
  thread_->wait();
}

void Connection::open(const ClientOptions& options) {
  options_ = options;
  open_ = false;
  events_->stop();
  QMetaObject::invokeMethod(worker_, [w = worker_, options] { w->open(options); }, Qt::QueuedConnection);
}

void Connection::close() {
  open_ = false;
  events_->stop();
  QMetaObject::invokeMethod(worker_, [w = worker_] { w->shutdown(); }, Qt::QueuedConnection);
}

void Connection::onOpened(QString endpoint, QString tenant, QString server_version) {
  endpoint_ = endpoint;
  tenant_ = tenant;
  server_version_ = server_version;
  open_ = true;
  events_->start(options_);
  emit opened();
}

void Connection::onOpenFailed(QString code, QString message) {
  open_ = false;
  emit openFailed(code, message);
}

quint64 Connection::post(QObject* context, Op op, RequestBody body, Frames frames, Handler handler) {
  auto request = std::make_shared<PendingRequest>();
  request->local = next_++;
  request->context = context;
  request->op = op;
  request->body = std::move(body);
  request->frames = std::move(frames);
  request->handler = std::move(handler);
  ++sent_;
  QMetaObject::invokeMethod(worker_, [w = worker_, request] { w->submit(request); },
                            Qt::QueuedConnection);
  return request->local;
}

}  // namespace spindle::ui
