#pragma once
// Added tokens of a tokenizer.json (special or not) and the matcher that splits text on them,
// following tokenizers' AddedVocabulary::find_matches: leftmost-longest, non-overlapping
// matches of the token contents; single_word / lstrip / rstrip honoured.
//
// Thread-safety: immutable after construction.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spindle::engine {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // the match also swallows whitespace before it
  bool rstrip = false;       // ... and after it
  bool single_word = false;  // match only when not inside a word
  bool normalized = false;   // matched against normalized text (else against the raw input)
};

// A piece of text between added tokens (token_id < 0) or one added-token match.
struct AddedSegment {
  std::string_view text;
  int32_t token_id = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the string to look for (the token's content, normalized where the token
  // is), `tokens[i]` the token it stands for. Empty patterns are ignored.
  AddedTokenMatcher(std::vector<std::string> patterns, std::vector<AddedToken> tokens);

  // Splits `text` into segments, in order; their texts cover `text` exactly (a match's
  // segment includes whitespace it stripped). Special tokens are skipped (left as text) when
  // `match_special` is false, as tokenizers does with encode_special_tokens.
  void split(std::string_view text, bool match_special, std::vector<AddedSegment>& out) const;

  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::unordered_map<uint8_t, int32_t> next;
    int32_t token = -1;  // index into tokens_ of the pattern ending here
  };
  // Longest pattern starting at text[pos]: index into tokens_ and its length, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& len) const;

  std::vector<Node> nodes_;  // trie over pattern bytes; nodes_[0] is the root
  std::vector<AddedToken> tokens_;
};

}  // namespace spindle::engine
