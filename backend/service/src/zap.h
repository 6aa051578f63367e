#pragma once
// ZAP handler (RFC 27): a REP socket on inproc://zeromq.zap.01, owned by its own thread, bound
// BEFORE any CURVE server socket so no handshake runs unauthenticated.
//   NULL   admitted (the IPC endpoints; their protection is the socket file's 0600 mode)
//   CURVE  admitted when the client's public key is in the allow-list file (re-read when its
//          modification time changes); otherwise refused (400) and logged
//   other  refused and logged

#include <atomic>
#include <filesystem>
#include <thread>

#include <spdlog/logger.h>
#include <zmq.hpp>

namespace spindle::service {

class ZapHandler {
 public:
  // Binds now (throws zmq::error_t); serves on a new thread until stop().
  ZapHandler(zmq::context_t& context, std::filesystem::path allow_list,
             std::shared_ptr<spdlog::logger> log);
  ~ZapHandler() { stop(); }
  void stop();

 private:
  void loop();
  zmq::socket_t socket_;
  std::filesystem::path allow_list_;
  std::shared_ptr<spdlog::logger> log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace spindle::service
