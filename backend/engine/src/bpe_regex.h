#pragma once
// Pre-tokenizer regexes for Hugging Face tokenizer.json patterns, compiled with PCRE2 in UTF +
// UCP mode (Unicode \p{..}) with PCRE2_MATCH_INVALID_UTF: subjects may hold bytes that are not
// UTF-8; no match ever covers them, so they fall into the gaps between matches.
//
// Hugging Face compiles these patterns with Oniguruma, whose `\s` is Unicode White_Space.
// PCRE2 10.42's `\s` differs (it also matches U+180E), so `\s` / `\S` are rewritten to the
// explicit White_Space set before compiling. (`\S` inside a character class is left as PCRE2's.)
//
// Thread-safety: a BpeRegex is immutable after construction; each calling thread passes its
// own RegexScratch.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace spindle::engine {

// Per-call matching state (match data, JIT stack). Not shared between threads.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;

 private:
  friend class BpeRegex;
  pcre2_real_match_data_8* match_data_ = nullptr;
  pcre2_real_match_context_8* match_context_ = nullptr;
  pcre2_real_jit_stack_8* jit_stack_ = nullptr;
};

using ByteRange = std::pair<size_t, size_t>;  // [first, second) byte offsets

class BpeRegex {
 public:
  // Throws format naming `where` (e.g. "tokenizer.json: pre_tokenizer.pattern.Regex"), the
  // PCRE2 message and the pattern offset when the pattern does not compile.
  BpeRegex(std::string_view pattern, std::string_view where);
  ~BpeRegex();
  BpeRegex(const BpeRegex&) = delete;
  BpeRegex& operator=(const BpeRegex&) = delete;

  // Appends the non-empty, non-overlapping leftmost matches in `text` to `out`, in order.
  // Throws internal (naming the byte offset) if PCRE2 fails for a reason other than no match.
  void find_all(std::string_view text, RegexScratch& scratch, std::vector<ByteRange>& out) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
  std::string where_;
};

// The pattern with `\s` and `\S` replaced by explicit Unicode White_Space classes (see above).
std::string rewrite_whitespace_escapes(std::string_view pattern);

}  // namespace spindle::engine
