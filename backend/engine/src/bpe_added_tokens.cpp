#include "bpe_added_tokens.h"

#include <algorithm>

#include "tokenizer_unicode.h"
#include "utf8.h"

namespace spindle::engine {
namespace {

// Byte length of the whitespace run that ends `s` (Rust regex `\s*$`).
size_t trailing_space(std::string_view s) {
  size_t end = s.size(), pos = 0, len = 0;
  while (end > 0 && utf8::last_char(s.substr(0, end), pos, len) &&
         is_white_space(utf8::decode(s, pos, len))) {
    end = pos;
  }
  return s.size() - end;
}

// Byte length of the whitespace run that starts `s` (Rust regex `^\s*`).
size_t leading_space(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t n = utf8::char_length(s, pos);
    if (n == 0 || !is_white_space(utf8::decode(s, pos, n))) break;
    pos += n;
  }
  return pos;
}

bool ends_with_word(std::string_view s) {
  size_t pos = 0, len = 0;
  return utf8::last_char(s, pos, len) && is_word_char(utf8::decode(s, pos, len));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  const size_t n = utf8::char_length(s, 0);
  return n != 0 && is_word_char(utf8::decode(s, 0, n));
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<std::string> patterns,
                                     std::vector<AddedToken> tokens)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (patterns[i].empty()) continue;
    int32_t node = 0;
    for (const char c : patterns[i]) {
      const auto b = static_cast<uint8_t>(c);
      auto it = nodes_[node].next.find(b);
      if (it == nodes_[node].next.end()) {
        nodes_.emplace_back();
        it = nodes_[node].next.emplace(b, static_cast<int32_t>(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    // Two tokens with the same pattern: the first listed wins.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(i);
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = nodes_[node].next.find(static_cast<uint8_t>(text[i]));
    if (it == nodes_[node].next.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      len = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, bool match_special,
                              std::vector<AddedSegment>& out) const {
  size_t start_offset = 0;  // end of the last emitted segment
  size_t pos = 0;           // where the next match may start
  while (pos < text.size() && !tokens_.empty()) {
    size_t len = 0;
    const int32_t idx = longest_at(text, pos, len);
    if (idx < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[static_cast<size_t>(idx)];
    size_t start = pos, stop = pos + len;
    pos = stop;  // a skipped match still consumes its bytes (non-overlapping search)
    if (tok.special && !match_special) continue;
    if (tok.single_word) {
      const bool start_space = start == 0 || !ends_with_word(text.substr(0, start));
      const bool stop_space = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      const size_t stripped = start - trailing_space(text.substr(0, start));
      start = std::max(stripped, start_offset);  // spaces a previous match took stay there
    }
    if (tok.rstrip) stop += leading_space(text.substr(stop));
    if (start > start_offset) out.push_back({text.substr(start_offset, start - start_offset), -1});
    out.push_back({text.substr(start, stop - start), tok.id});
    start_offset = stop;
    pos = stop;
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), -1});
}

}  // namespace spindle::engine
