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
#include "walker.h"

namespace spindle::protocol::detail {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is invalid (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
inline size_t utf8_sequence(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return uint8_t(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

inline std::string json_string(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

struct JsonSafety : Walker::Visitor {
  void string(const Walker&, std::string& s) override {
    for (size_t i = 0; i < s.size();) {
      const size_t n = utf8_sequence(s, i);
      if (n == 0) {
        s = json_string(s);
        return;
      }
      i += n;
    }
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
