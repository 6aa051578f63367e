#pragma once
// The optional metrics endpoint (spindled --metrics-port): an HTTP server (cpp-httplib) on its
// own thread, owned by MetricsServer. GET /metrics answers 200 with `render()`'s text as
// kMetricsContentType (metrics.h); every other path and method answers 404. One connection at a
// time, one request per connection, on the server thread (no worker pool: STYLE.md 6).
//
// Threading: the constructor binds and starts the thread; `render` then runs on that thread
// only and must read nothing but thread-safe state (collect_metrics does). stop() (and the
// destructor) closes the listening socket and joins; call it before anything `render` reads is
// torn down. port(), url() are safe from any thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace spindle::service {

class MetricsServer {
 public:
  // Listens on `bind`:`port`; port -1 takes any free port (port() tells which). Throws
  // spindle::Error naming the address when it cannot (port in use, bind not a local address).
  MetricsServer(const std::string& bind, int32_t port, std::function<std::string()> render);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int32_t port() const { return port_; }
  std::string url() const;  // http://BIND:PORT/metrics ([BIND] for an IPv6 literal)
  // Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string bind_;
  int32_t port_ = 0;
  std::thread thread_;
};

}  // namespace spindle::service
