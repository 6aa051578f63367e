#pragma once
// Reading streams (sample_stream, subscribe) with the service tests' RawClient.

#include <algorithm>
#include <functional>
#include <vector>

#include "daemon.h"

namespace spindle::testing {

// Every message received within `ms` (any request id).
inline std::vector<protocol::Reply> drain(RawClient& c, int ms) {
  std::vector<protocol::Reply> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto r = c.receive(50)) out.push_back(std::move(*r));
  }
  return out;
}

// One reply to each of `ids` (others dropped), in arrival order; fails the test on a timeout.
inline std::vector<protocol::Reply> replies_to(RawClient& c, const std::vector<uint64_t>& ids,
                                               int timeout_ms = 120000) {
  std::vector<protocol::Reply> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (out.size() < ids.size() && std::chrono::steady_clock::now() < deadline) {
    auto r = c.receive(100);
    if (r && std::find(ids.begin(), ids.end(), r->request_id) != ids.end()) {
      out.push_back(std::move(*r));
    }
  }
  EXPECT_EQ(out.size(), ids.size()) << "replies missing";
  return out;
}

// Messages of request `id` (others dropped) up to and including the first for which `stop`
// holds; fails the test when none does within timeout_ms.
inline std::vector<protocol::Reply> read_until(RawClient& c, uint64_t id,
                                               const std::function<bool(const protocol::Reply&)>& stop,
                                               int timeout_ms = 120000) {
  std::vector<protocol::Reply> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = c.receive(100);
    if (!r || r->request_id != id) continue;
    out.push_back(std::move(*r));
    if (stop(out.back())) return out;
  }
  ADD_FAILURE() << "stream " << id << " did not reach the expected message (" << out.size()
                << " message(s) read)";
  return out;
}

// Reads request `id` until its final message (protocol::is_final_reply).
inline std::vector<protocol::Reply> read_stream(RawClient& c, uint64_t id, int timeout_ms = 120000) {
  return read_until(c, id, [](const protocol::Reply& r) { return protocol::is_final_reply(r); },
                    timeout_ms);
}

}  // namespace spindle::testing
