#include "spindle/ui/event_stream.h"

#include <QThread>
#include <QTimer>

#include <memory>

namespace spindle::ui {

using namespace protocol;

// Worker side: runs on the event thread. Polls its socket every few milliseconds while
// subscribed; retries the subscription every retry_ms while not.
class EventWorker : public QObject {
 public:
  explicit EventWorker(EventStream* owner) : owner_(owner) {}

  void start(ClientOptions options, int retry_ms) {
    stop();
    options_ = std::move(options);
    options_.client_name = "spindle-studio-events";
    options_.timeout_ms = std::min(options_.timeout_ms, 5000);
    retry_ms_ = retry_ms;
    if (!timer_) {
      timer_ = new QTimer(this);
      connect(timer_, &QTimer::timeout, this, [this] { tick(); });
    }
    running_ = true;
    timer_->start(5);
    tick();
  }

  void stop() {
    running_ = false;
    if (timer_) timer_->stop();
    if (client_ && subscription_) {
      try {
        client_->send(Op::unsubscribe, UnsubscribeRequest{subscription_});
      } catch (const ClientError&) {
      }
    }
    client_.reset();
    subscription_ = 0;
    set_state(false, "stopped");
  }

 private:
  void tick() {
    if (!running_) return;
    if (!client_) {
      const auto now = std::chrono::steady_clock::now();
      if (now < next_attempt_) return;
      next_attempt_ = now + std::chrono::milliseconds(retry_ms_);
      try {
        client_ = std::make_unique<Client>(options_);
        subscription_ = client_->send(Op::subscribe, SubscribeRequest{});
      } catch (const ClientError& e) {
        client_.reset();
        set_state(false, QString::fromUtf8(e.what()));
      }
      return;
    }
    try {
      for (int i = 0; i < 256; ++i) {
        std::optional<Reply> r = client_->receive(0);
        if (!r) break;
        if (r->request_id != subscription_) continue;
        if (!r->ok) {
          lose(QString::fromStdString(r->error.code + ": " + r->error.message));
          return;
        }
        const auto& e = std::get<EventReply>(r->body);
        if (e.topic == "subscribed") {
          set_state(true, {});
        } else if (e.final) {
          lose("the daemon closed the event stream");
          return;
        } else {
          QMetaObject::invokeMethod(owner_, [o = owner_, e] { o->handleEvent(e); },
                                    Qt::QueuedConnection);
        }
      }
    } catch (const ClientError& e) {
      lose(QString::fromUtf8(e.what()));
    }
  }

  void lose(const QString& why) {
    client_.reset();
    subscription_ = 0;
    next_attempt_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(retry_ms_);
    set_state(false, why);
  }

  void set_state(bool live, const QString& why) {
    if (live == live_) return;
    live_ = live;
    QMetaObject::invokeMethod(owner_, [o = owner_, live, why] { o->handleState(live, why); },
                              Qt::QueuedConnection);
  }

  EventStream* owner_;
  ClientOptions options_;
  int retry_ms_ = 2000;
  bool running_ = false;
  bool live_ = false;
  std::unique_ptr<Client> client_;
  uint64_t subscription_ = 0;
  std::chrono::steady_clock::time_point next_attempt_{};
  QTimer* timer_ = nullptr;
};

EventStream::EventStream(QObject* parent) : QObject(parent) {
  thread_ = new QThread(this);
  thread_->setObjectName("spindle-events");
  worker_ = new EventWorker(this);
  worker_->moveToThread(thread_);
  connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
  thread_->start();
}

EventStream::~EventStream() {
  QMetaObject::invokeMethod(worker_, [w = worker_] { w->stop(); }, Qt::BlockingQueuedConnection);
  thread_->quit();
  thread_->wait();
}

void EventStream::start(const ClientOptions& options, int retry_ms) {
  QMetaObject::invokeMethod(worker_, [w = worker_, options, retry_ms] { w->start(options, retry_ms); },
                            Qt::QueuedConnection);
}

void EventStream::stop() {
  QMetaObject::invokeMethod(worker_, [w = worker_] { w->stop(); }, Qt::QueuedConnection);
}

void EventStream::handleEvent(const EventReply& event) {
  ++received_;
  if (event.topic == "metrics") emit metrics(event.run);
  if (event.topic == "residency") emit residency(event.status);
}

void EventStream::handleState(bool live, const QString& why) {
  live_ = live;
  if (live) {
    if (was_live_) emit resubscribed();
    else emit subscribed();
    was_live_ = true;
  } else if (!why.isEmpty() && why != "stopped") {
    emit lost(why);
  }
}

}  // namespace spindle::ui
