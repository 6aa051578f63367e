#include "bpe_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "spindle/core/error.h"
#include "utf8.h"

namespace spindle::engine {
namespace {

// Unicode White_Space (stable since Unicode 6.3), as class-body items.
constexpr std::string_view kWhiteSpaceItems =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "unknown PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace

std::string rewrite_whitespace_escapes(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or "[^"
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 'Q') {  // \Q...\E quotes literally: copy through unchanged
        const size_t end = p.find("\\E", i + 2);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i, stop - i));
        i = stop - 1;
        continue;
      }
      if (e == 's') {
        if (in_class) {
          out.append(kWhiteSpaceItems);
        } else {
          out.append("[").append(kWhiteSpaceItems).append("]");
        }
        ++i;
        continue;
      }
      if (e == 'S' && !in_class) {
        out.append("[^").append(kWhiteSpaceItems).append("]");
        ++i;
        continue;
      }
      out.push_back(c);
      out.push_back(e);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      class_start = i + 1;
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:name:]
        const size_t end = p.find(":]", i + 2);
        if (end != std::string_view::npos) {
          out.append(p.substr(i, end + 2 - i));
          i = end + 1;
          continue;
        }
      }
      if (c == ']' && i != class_start) in_class = false;  // a leading ']' is literal
    }
    out.push_back(c);
  }
  return out;
}

RegexScratch::RegexScratch() {
  match_data_ = pcre2_match_data_create(1, nullptr);
  match_context_ = pcre2_match_context_create(nullptr);
  jit_stack_ = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  SPINDLE_CHECK(match_data_ && match_context_, resource, "PCRE2: out of memory for match data");
  if (jit_stack_) pcre2_jit_stack_assign(match_context_, nullptr, jit_stack_);
}

RegexScratch::~RegexScratch() {
  if (jit_stack_) pcre2_jit_stack_free(jit_stack_);
  pcre2_match_context_free(match_context_);
  pcre2_match_data_free(match_data_);
}

BpeRegex::BpeRegex(std::string_view pattern, std::string_view where) : where_(where) {
  const std::string rewritten = rewrite_whitespace_escapes(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset,
                        nullptr);
  SPINDLE_CHECK(code_ != nullptr, format,
                "{}: regex does not compile: {} (at offset {} of the rewritten pattern '{}')",
                where_, pcre2_message(err), err_offset, rewritten);
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;  // no JIT: the interpreter is used
}

BpeRegex::~BpeRegex() { pcre2_code_free(code_); }

void BpeRegex::find_all(std::string_view text, RegexScratch& scratch,
                        std::vector<ByteRange>& out) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), start, 0, scratch.match_data_,
                               scratch.match_context_);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    SPINDLE_CHECK(rc >= 0, internal, "{}: regex match failed at byte offset {}: {}", where_, start,
                  pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.match_data_);
    const size_t b = ov[0], e = ov[1];
    SPINDLE_ASSERT(b <= e && e <= text.size() && b >= start);
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {  // empty match: skip one character (or one invalid byte) and search on
      start = b + utf8::step(text, b);
    }
  }
}

}  // namespace spindle::engine
