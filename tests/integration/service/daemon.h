#pragma once
// Test support for the service suites: launches a real `spindled` process on a temporary data
// directory and waits for its "spindled ready: <endpoints>" line; a raw DEALER client that
// speaks the wire format directly (protocol/wire.h), so tests can also send what no client
// library would (garbage, wrong versions, floods).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <thread>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "run_spindle.h"
#include "shared_fixtures.h"
#include "spindled_process.h"
#include "spindle/protocol/wire.h"

namespace spindle::testing {

namespace fs = std::filesystem;

inline fs::path stories_model() {
  return shared_dir() / "models" / "stories260K" / "stories260K.bin";
}

inline fs::path fresh_dir(const std::string& tag) {
  std::random_device rd;
  const fs::path d = fs::temp_directory_path() /
                     ("spindled_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Two tenants, alice and bob, each with its own token: a fresh data dir whose tokens.json
// holds both (the daemon then creates no `local` token).
inline const std::string kTokenA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";  // alice
inline const std::string kTokenB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";  // bob

inline fs::path two_tenant_dir(const std::string& tag) {
  const fs::path dir = fresh_dir(tag);
  std::ofstream(dir / "tokens.json") << R"([{"token": ")" << kTokenA
                                     << R"(", "tenant": "alice"}, {"token": ")" << kTokenB
                                     << R"(", "tenant": "bob"}])";
  return dir;
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One spindled process on stories260K (see spindled_process.h for how it is run).
class Daemon {
 public:
  Daemon(fs::path data_dir, std::vector<std::string> extra_args)
      : process_(binary_dir() / "app" / "spindled", data_dir,
                 with_model(std::move(extra_args)), /*ready_timeout_s=*/60) {}

  int terminate() { return process_.terminate(); }
  void kill_now() { process_.kill_now(); }
  const std::string& ipc() const { return process_.endpoints().at(0); }
  const std::string& tcp() const { return process_.endpoints().at(1); }
  // Every endpoint of the ready line: IPC, TCP (with --tcp), the metrics URL (--metrics-port).
  const std::vector<std::string>& endpoints() const { return process_.endpoints(); }
  const fs::path& data_dir() const { return process_.data_dir(); }
  pid_t pid() const { return process_.pid(); }
  std::string token() const { return process_.token(); }
  std::string log() const {
    return read_text(data_dir() / "logs" / "spindled.log") + read_text(data_dir() / "stderr");
  }

 private:
  static std::vector<std::string> with_model(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model", stories_model().string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  SpindledProcess process_;
};

struct CurveKeys {
  std::string server_public, client_public, client_secret;
};

// A DEALER speaking the wire format directly.
class RawClient {
 public:
  RawClient(const std::string& endpoint, std::string token,
            const std::optional<CurveKeys>& curve = std::nullopt)
      : socket_(context_, zmq::socket_type::dealer), token_(std::move(token)) {
    socket_.set(zmq::sockopt::linger, 0);
    if (curve) {
      socket_.set(zmq::sockopt::curve_serverkey, curve->server_public);
      socket_.set(zmq::sockopt::curve_publickey, curve->client_public);
      socket_.set(zmq::sockopt::curve_secretkey, curve->client_secret);
    }
    socket_.connect(endpoint);
  }

  uint64_t send(protocol::Op op, protocol::RequestBody body, protocol::Frames frames = {},
                protocol::Encoding encoding = protocol::Encoding::binary) {
    protocol::Request r;
    r.encoding = encoding;
    r.request_id = ++next_id_;
    r.token = token_;
    r.op = op;
    r.body = std::move(body);
    r.frames = std::move(frames);
    std::vector<std::string> parts = {protocol::encode_request_header(r)};
    parts.insert(parts.end(), r.frames.begin(), r.frames.end());
    send_raw(parts);
    return r.request_id;
  }

  void send_raw(const std::vector<std::string>& parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
      socket_.send(zmq::buffer(parts[i]),
                   i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  std::optional<protocol::Reply> receive(int timeout_ms) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) return std::nullopt;
    std::vector<zmq::message_t> msgs;
    if (!zmq::recv_multipart(socket_, std::back_inserter(msgs))) return std::nullopt;
    std::vector<std::string> parts;
    for (auto& m : msgs) parts.push_back(m.to_string());
    return protocol::decode_reply(parts);
  }

  // Sends and waits for this request's reply (other replies are dropped).
  protocol::Reply call(protocol::Op op, protocol::RequestBody body, protocol::Frames frames = {},
                       int timeout_ms = 120000) {
    const uint64_t id = send(op, std::move(body), std::move(frames));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = receive(200);
      if (r && r->request_id == id) return *r;
    }
    throw std::runtime_error(std::string("no reply to ") + protocol::op_name(op));
  }

  // call() that must succeed; returns the typed body and keeps the frames in last_frames.
  template <class T>
  T ok(protocol::Op op, protocol::RequestBody body, protocol::Frames frames = {}) {
    protocol::Reply r = call(op, std::move(body), std::move(frames));
    if (!r.ok) {
      throw std::runtime_error(std::string(protocol::op_name(op)) + " failed: " + r.error.code +
                               ": " + r.error.message);
    }
    last_frames = std::move(r.frames);
    return std::get<T>(r.body);
  }

  protocol::Frames last_frames;

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string token_;
  uint64_t next_id_ = 0;
};

// ---- request builders ------------------------------------------------------------------------

inline protocol::SampleRequest sample_request(const std::string& address,
                                              const std::vector<int32_t>& prompt,
                                              protocol::Frames& frames, int32_t max_tokens,
                                              float temperature, uint64_t seed,
                                              int32_t num_samples = 1) {
  protocol::SampleRequest s;
  s.address = address;
  s.prompt = protocol::add_tensor(frames, std::span<const int32_t>(prompt));
  s.num_samples = num_samples;
  s.sampling_params.max_tokens = max_tokens;
  s.sampling_params.temperature = temperature;
  s.sampling_params.seed = seed;
  return s;
}

// A cross-entropy datum: predict tokens[1..] from tokens[..n-1].
inline protocol::ForwardBackwardRequest fb_request(const std::string& session,
                                                   const std::vector<std::vector<int32_t>>& seqs,
                                                   protocol::Frames& frames) {
  protocol::ForwardBackwardRequest r;
  r.session_id = session;
  r.loss_fn = "cross_entropy";
  for (const auto& s : seqs) {
    const std::vector<int32_t> in(s.begin(), s.end() - 1), target(s.begin() + 1, s.end());
    protocol::DatumMsg d;
    d.model_input = protocol::add_tensor(frames, std::span<const int32_t>(in));
    d.loss_fn_inputs.push_back({"target_tokens", protocol::add_tensor(frames, std::span<const int32_t>(target))});
    r.data.push_back(std::move(d));
  }
  return r;
}

// create_training on stories260K: rank 4, alpha 8.
inline protocol::CreateTrainingRequest training_request(const std::string& policy, uint64_t seed) {
  protocol::CreateTrainingRequest c;
  c.base_model = "stories260K";
  c.policy = policy;
  c.rank = 4;
  c.alpha = 8;
  c.seed = seed;
  return c;
}

// One forward_backward on `seq` (cross entropy) and one optim_step at `learning_rate`.
inline void train_step(RawClient& client, const std::string& session,
                       const std::vector<int32_t>& seq, float learning_rate) {
  protocol::Frames f;
  const auto req = fb_request(session, {seq}, f);
  client.ok<protocol::ForwardBackwardReply>(protocol::Op::forward_backward, req, f);
  protocol::AdamParamsMsg adam;
  adam.learning_rate = learning_rate;
  client.ok<protocol::OptimStepReply>(protocol::Op::optim_step,
                                      protocol::OptimStepRequest{session, adam});
}

// A greedy sample of `max_tokens` from `address` (the reply, error or not).
inline protocol::Reply sample_greedy(RawClient& client, const std::string& address,
                                     const std::vector<int32_t>& prompt, int32_t max_tokens) {
  protocol::Frames f;
  const auto req = sample_request(address, prompt, f, max_tokens, 0.0f, 1);
  return client.call(protocol::Op::sample, req, f);
}

inline double metric(const protocol::ForwardBackwardReply& r, const std::string& name) {
  for (const auto& m : r.metrics) if (m.name == name) return m.value;
  throw std::runtime_error("no metric " + name);
}

}  // namespace spindle::testing
