#include "zap.h"

#include <zmq_addon.hpp>

#include <set>

#include "setup.h"

namespace spindle::service {

namespace fs = std::filesystem;

ZapHandler::ZapHandler(zmq::context_t& context, fs::path allow_list,
                       std::shared_ptr<spdlog::logger> log)
    : socket_(context, zmq::socket_type::rep), allow_list_(std::move(allow_list)), log_(std::move(log)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { loop(); });
}

void ZapHandler::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::loop() {
  std::set<std::string> keys;
  fs::file_time_type loaded{};
  bool have_loaded = false;
  const auto refresh = [&] {
    std::error_code ec;
    const auto mtime = fs::last_write_time(allow_list_, ec);
    if (ec) {
      if (have_loaded && !keys.empty()) log_->info("allow-list {} is gone: no CURVE client admitted", allow_list_.string());
      keys.clear();
      have_loaded = true;
      loaded = {};
      return;
    }
    if (have_loaded && mtime == loaded) return;
    try {
      const auto list = read_authorized_keys(allow_list_);
      keys = {list.begin(), list.end()};
      log_->info("allow-list {}: {} CURVE client key(s)", allow_list_.string(), keys.size());
    } catch (const std::exception& e) {
      log_->error("allow-list unreadable, admitting no CURVE client: {}", e.what());
      keys.clear();
    }
    loaded = mtime;
    have_loaded = true;
  };

  while (!stop_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      continue;
    }
    if (!(item.revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> req;
    try {
      if (!zmq::recv_multipart(socket_, std::back_inserter(req), zmq::recv_flags::dontwait)) continue;
    } catch (const zmq::error_t&) {
      continue;
    }
    // version, request_id, domain, address, identity, mechanism, credentials...
    std::string status = "400", text = "malformed ZAP request";
    std::string request_id = req.size() > 1 ? req[1].to_string() : "";
    if (req.size() >= 6 && req[0].to_string() == "1.0") {
      const std::string address = req[3].to_string(), mechanism = req[5].to_string();
      if (mechanism == "NULL") {
        status = "200", text = "OK";
      } else if (mechanism == "CURVE" && req.size() >= 7 && req[6].size() == 32) {
        refresh();
        char z85[41];
        zmq_z85_encode(z85, static_cast<const uint8_t*>(req[6].data()), 32);
        if (keys.count(z85) != 0) {
          status = "200", text = "OK";
        } else {
          text = "client key not authorized";
          log_->warn("refused CURVE client {} from {}: key not in {}", z85, address,
                     allow_list_.string());
        }
      } else {
        text = "mechanism not allowed";
        log_->warn("refused {} client from {}: only CURVE is accepted on TCP", mechanism, address);
      }
    }
    std::array<zmq::const_buffer, 6> reply = {zmq::str_buffer("1.0"), zmq::buffer(request_id),
                                              zmq::buffer(status), zmq::buffer(text),
                                              zmq::str_buffer(""), zmq::str_buffer("")};
    try {
      zmq::send_multipart(socket_, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
    }
  }
}

}  // namespace spindle::service
