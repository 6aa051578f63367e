// libFuzzer entry for the protocol decoder. Input: message parts separated by kPartSeparator
// (part 0 is the header). Every input must decode and validate, or fail with ProtocolError;
// anything else escapes (a crash to the fuzzer). A request that decodes must re-encode to the
// same binary header after a second round trip.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/protocol/wire.h"

namespace spindle::protocol::fuzz {

inline constexpr std::string_view kPartSeparator("\xff\xfe\xfd\xfc", 4);

std::vector<std::string> split_parts(std::string_view data) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t at = data.find(kPartSeparator, start);
    if (at == std::string_view::npos) {
      parts.emplace_back(data.substr(start));
      return parts;
    }
    parts.emplace_back(data.substr(start, at - start));
    start = at + kPartSeparator.size();
  }
}

}  // namespace spindle::protocol::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spindle::protocol;
  const auto parts =
      fuzz::split_parts(std::string_view(reinterpret_cast<const char*>(data), size));
  Limits limits;
  limits.max_header_bytes = 1 << 16;
  limits.max_frames = 64;
  limits.max_frame_bytes = 1 << 20;
  limits.max_tokens_per_request = 4096;
  try {
    Request r = decode_request(parts, limits);
    try {
      validate_request(r, limits);
    } catch (const ProtocolError& e) {
      (void)encode_reply_header(make_error_reply(e));
    }
    // Binary round trip is exact from the second encoding on.
    r.encoding = Encoding::binary;
    const std::string once = encode_request_header(r);
    std::vector<std::string> again{once};
    again.insert(again.end(), r.frames.begin(), r.frames.end());
    const Request back = decode_request(again, limits);
    if (encode_request_header(back) != once) __builtin_trap();
    r.encoding = Encoding::json;
    try {
      (void)decode_request(std::vector<std::string>{encode_request_header(r)}, Limits{});
    } catch (const ProtocolError& e) {
      if (e.code() != errc::internal) __builtin_trap();  // only NaN/Inf may be refused
    }
  } catch (const ProtocolError& e) {
    Reply reply = make_error_reply(e);
    (void)encode_reply_header(reply);
  }
  try {
    (void)decode_reply(parts, limits);
  } catch (const ProtocolError&) {
  }
  return 0;
}
