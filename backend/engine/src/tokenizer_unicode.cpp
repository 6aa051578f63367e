#include "tokenizer_unicode.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "spindle/core/error.h"
#include "utf8.h"

namespace spindle::engine {
namespace {

// NFC of one well-formed UTF-8 run.
void nfc_run(std::string_view run, std::string& out) {
  SPINDLE_CHECK(run.size() < size_t(std::numeric_limits<int32_t>::max() / 4), invalid_argument,
                "tokenizer: text of {} bytes is too long to normalize", run.size());
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  SPINDLE_CHECK(U_SUCCESS(err), internal, "ICU: NFC normalizer unavailable: {}", u_errorName(err));

  // UTF-8 never has fewer bytes than UTF-16 code units, so run.size() units always suffice.
  std::vector<UChar> src(run.size() + 1);
  int32_t src_len = 0;
  u_strFromUTF8(src.data(), static_cast<int32_t>(src.size()), &src_len, run.data(),
                static_cast<int32_t>(run.size()), &err);
  SPINDLE_CHECK(U_SUCCESS(err), internal, "ICU: UTF-8 to UTF-16 failed: {}", u_errorName(err));

  std::vector<UChar> dst(static_cast<size_t>(src_len) + 16);
  int32_t dst_len = unorm2_normalize(nfc, src.data(), src_len, dst.data(),
                                     static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(dst_len) + 1);
    dst_len = unorm2_normalize(nfc, src.data(), src_len, dst.data(),
                               static_cast<int32_t>(dst.size()), &err);
  }
  SPINDLE_CHECK(U_SUCCESS(err), internal, "ICU: NFC normalization failed: {}", u_errorName(err));

  const size_t base = out.size();
  out.resize(base + static_cast<size_t>(dst_len) * 3 + 1);
  int32_t utf8_len = 0;
  u_strToUTF8(out.data() + base, static_cast<int32_t>(out.size() - base), &utf8_len, dst.data(),
              dst_len, &err);
  SPINDLE_CHECK(U_SUCCESS(err), internal, "ICU: UTF-16 to UTF-8 failed: {}", u_errorName(err));
  out.resize(base + static_cast<size_t>(utf8_len));
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size() + 8);
  size_t run_start = 0, pos = 0;
  while (pos < text.size()) {
    const size_t n = utf8::char_length(text, pos);
    if (n != 0) {
      pos += n;
      continue;
    }
    if (pos > run_start) nfc_run(text.substr(run_start, pos - run_start), out);
    out.push_back(text[pos]);  // invalid byte: copied through
    run_start = ++pos;
  }
  if (pos > run_start) nfc_run(text.substr(run_start, pos - run_start), out);
  return out;
}

bool is_white_space(char32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)) != 0; }

bool is_word_char(char32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int32_t mask = U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK;
  return (U_MASK(u_charType(c)) & mask) != 0;
}

}  // namespace spindle::engine
