#pragma once
// What cereal's JSON writer would get wrong, fixed before it writes: it emits NaN/Infinity
// (not JSON) and copies invalid UTF-8 bytes into strings (not JSON either). A 'J' message
// therefore refuses non-finite numbers (ProtocolError internal: NaN belongs in tensor frames)
// and replaces each byte of an invalid UTF-8 sequence with U+FFFD, as Python's
// bytes.decode(errors="replace") does. The binary encoding carries strings unchanged.

#include <cmath>
#include <string>
#include <variant>

#include "spindle/protocol/wire.h"
#include "utf8.h"
#include "walker.h"

namespace spindle::protocol::detail {

inline std::string json_string(const std::string& s) {
  return first_invalid_utf8(s) == std::string::npos ? s : utf8_repaired(s);
}

struct JsonSafety : Walker::Visitor {
  void string(const Walker&, std::string& s) override {
    if (first_invalid_utf8(s) != std::string::npos) s = utf8_repaired(s);
  }
  void number(const Walker& w, double v) override {
    if (!std::isfinite(v))
      throw ProtocolError(errc::internal, "cannot encode " + w.path() + " = " +
                                              std::to_string(v) +
                                              " in JSON (non-finite numbers go in tensor frames)");
  }
};

// A copy of `value` that cereal's JSON writer renders as valid JSON. Throws ProtocolError.
template <class T>
T json_safe(const T& value) {
  T copy = value;
  JsonSafety safety;
  if constexpr (requires { copy.index(); })
    std::visit([&](auto& v) { walk(v, safety); }, copy);
  else
    walk(copy, safety);
  return copy;
}

}  // namespace spindle::protocol::detail
