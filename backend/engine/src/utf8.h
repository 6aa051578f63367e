#pragma once
// UTF-8 helpers for the tokenizers. Input text is arbitrary bytes: every function here accepts
// invalid UTF-8 and never reads past the view it is given.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace spindle::engine::utf8 {

// Length (1..4) of the well-formed UTF-8 character starting at s[pos], or 0 when the bytes
// there are not one (lone continuation byte, truncated sequence, overlong form, surrogate,
// code point above U+10FFFF, 0xF8..0xFF). Requires pos < s.size().
inline size_t char_length(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // > U+10FFFF
  } else {
    return 0;
  }
  if (pos + len > s.size()) return 0;
  const auto b1 = static_cast<uint8_t>(s[pos + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if (b < 0x80 || b > 0xBF) return 0;
  }
  return len;
}

// Code point of the well-formed character of `len` bytes (from char_length) at s[pos].
inline char32_t decode(std::string_view s, size_t pos, size_t len) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[pos + i])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

// Appends the UTF-8 encoding of cp (cp <= U+10FFFF, not a surrogate).
inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Bytes to step over at s[pos] (pos < size): a whole character, or 1 for an invalid byte.
inline size_t step(std::string_view s, size_t pos) {
  const size_t n = char_length(s, pos);
  return n == 0 ? 1 : n;
}

// Last character of s: sets pos/len and returns true when s ends in a well-formed character.
inline bool last_char(std::string_view s, size_t& pos, size_t& len) {
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const size_t p = s.size() - back;
    const size_t n = char_length(s, p);
    if (n == back) {
      pos = p;
      len = n;
      return true;
    }
    if (n != 0) return false;  // a character starts here but does not end at the end
  }
  return false;
}

}  // namespace spindle::engine::utf8
