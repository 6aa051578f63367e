#include "metrics_http.h"

#include <sys/socket.h>

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "metrics.h"
#include "spindle/core/error.h"

namespace spindle::service {
namespace {

// Runs each accepted connection on the accepting thread itself: the server thread is the one
// thread that touches the listening and the client sockets.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// SO_REUSEADDR only. httplib's default also sets SO_REUSEPORT, which would let a second daemon
// bind the same port silently and split the scrapes between the two.
void listen_socket_options(socket_t sock) {
  int yes = 1;
  ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

}  // namespace

struct MetricsServer::Impl {
  httplib::Server server;
  std::atomic<bool> finished{false};  // listen_after_bind returned
};

MetricsServer::MetricsServer(const std::string& bind, int32_t port,
                             std::function<std::string()> render)
    : impl_(std::make_unique<Impl>()), bind_(bind) {
  SPINDLE_CHECK(port == -1 || (port >= 1 && port <= 65535), invalid_argument,
                "--metrics-port {}: expected 1..65535, or -1 for any free port (0 is off)", port);
  httplib::Server& s = impl_->server;
  s.new_task_queue = [] { return new InlineQueue; };
  s.set_socket_options(listen_socket_options);
  s.set_keep_alive_max_count(1);  // one request per connection: a client cannot hold the thread
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.Get("/metrics", [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(render(), kMetricsContentType);
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("metrics unavailable: ") + e.what() + "\n", "text/plain");
    }
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404) {
      res.set_content("not found: " + req.path + " (this server has GET /metrics only)\n",
                      "text/plain");
    }
  });

  errno = 0;
  bool bound = false;
  if (port == -1) {
    const int p = s.bind_to_any_port(bind);
    bound = p > 0;
    port_ = p;
  } else {
    bound = s.bind_to_port(bind, port);
    port_ = port;
  }
  if (!bound) {
    const int err = errno;
    SPINDLE_THROW(io, "--metrics-port {}: cannot listen on {}:{}{}{}", port, bind,
                  port == -1 ? std::string("(any port)") : std::to_string(port),
                  err != 0 ? ": " : " (--metrics-bind must be a local address)",
                  err != 0 ? std::strerror(err) : "");
  }
  thread_ = std::thread([impl = impl_.get()] {
    impl->server.listen_after_bind();
    impl->finished.store(true);
  });
  // stop() closes the socket only once the server is running: wait for it, so a stop() right
  // after construction cannot leave the thread blocked in accept().
  while (!s.is_running() && !impl_->finished.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

MetricsServer::~MetricsServer() { stop(); }

std::string MetricsServer::url() const {
  const std::string host = bind_.find(':') != std::string::npos ? "[" + bind_ + "]" : bind_;
  return "http://" + host + ":" + std::to_string(port_) + "/metrics";
}

void MetricsServer::stop() {
  if (!thread_.joinable()) return;
  impl_->server.stop();
  thread_.join();
}

}  // namespace spindle::service
