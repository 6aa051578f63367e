#pragma once
// Wire protocol between RewardScorer (binds a PAIR socket on ipc://<private tmp dir>/host-N)
// and spindle-reward-host (connects). Internal: both ends are built from this tree, so there is
// no compatibility window, only a version check in the handshake.
//
// Every message is ONE frame holding a MessagePack-encoded JSON object (nlohmann to_msgpack);
// MessagePack rather than JSON text because completions may hold bytes that are not UTF-8.
//
//   host -> scorer, once after connecting:
//     {"op": "hello", "protocol": kHostProtocolVersion, "abi": SPINDLE_REWARD_ABI_VERSION,
//      "pid": N}
//   scorer -> host requests, each answered by exactly one reply:
//     {"op": "list"}
//        -> {"ok": true, "plugins": [{"name", "description", "schema", "path", "abi",
//                         "version"}...],
//            "rejected": [{"name", "path", "code", "message"}...]}
//     {"op": "validate", "plugin": P, "config": "<config JSON text>"}  (create + destroy)
//        -> {"ok": true}
//     {"op": "score", "plugin": P, "config": "<config JSON text>",
//      "items": [{"prompt", "completion", "tokens": [ids], "reference", "metadata"}...]}
//        -> {"ok": true, "scores": [n doubles, all finite], "infos": [n strings]}
//     {"op": "shutdown"} -> {"ok": true}, then the host exits 0
//   any failure:
//     {"ok": false, "code": "<spindle::ErrorCode name>", "message": "..."}
//     codes: not_found (no such plugin), unsupported (ABI mismatch), invalid_argument (config
//     refused by create(), or an item refused by the plugin), internal (plugin failure or a
//     non-finite score; the message names the item index).
// A crash or a hang shows up on the scorer side only: the host process exits, or no reply
// comes within the timeout (the scorer SIGKILLs it).
//
// Containment (host_limits.h, proc_tree.h):
//   memory     the host runs under RLIMIT_AS (--memory-limit-mib; inherited by what it forks).
//              Reaching it (a failed operator new, a fault near the cap, or a plugin failure
//              near the cap) ends the host with exit status kHostExitMemoryLimit, which the
//              scorer reports as the term's memory limit.
//   processes  the host leads its own process group and is a child subreaper. After every
//              request it kills and reaps every child left (running, or exited and never
//              waited for) and answers that request with internal naming how many; a child of
//              a plugin's fork() that returns into the host exits at once, before it can touch
//              the socket. When the scorer kills a host (timeout, or after it died) it kills
//              the host's process tree and its process group.
//              Forks are not refused: RLIMIT_NPROC counts every process of the user (and root
//              ignores it), and a plugin may rightly run a program (a code-execution reward)
//              as long as it waits for it.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "spindle/core/error.h"

namespace spindle::rewards::wire {

inline constexpr int kHostProtocolVersion = 1;

// The host's exit status when it reached its memory limit (see "Containment").
inline constexpr int kHostExitMemoryLimit = 88;

inline std::string encode(const nlohmann::json& message) {
  std::vector<uint8_t> bytes = nlohmann::json::to_msgpack(message);
  return std::string(bytes.begin(), bytes.end());
}

// Throws format on bytes that are not a MessagePack object.
inline nlohmann::json decode(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  nlohmann::json j = nlohmann::json::from_msgpack(p, p + size, /*strict=*/true,
                                                  /*allow_exceptions=*/false);
  SPINDLE_CHECK(!j.is_discarded() && j.is_object(), format,
                "reward host protocol: a {}-byte frame is not a MessagePack object", size);
  return j;
}

inline nlohmann::json error_reply(ErrorCode code, const std::string& message) {
  return {{"ok", false}, {"code", error_code_name(code)}, {"message", message}};
}

}  // namespace spindle::rewards::wire
