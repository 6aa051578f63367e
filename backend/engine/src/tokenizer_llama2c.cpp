#include "tokenizer_llama2c.h"

#include <cmath>
#include <cstring>
#include <queue>

#include "spindle/core/error.h"
#include "spindle/core/file_io.h"

namespace spindle::engine {
namespace {

// run.c's decode: sscanf(piece, "<0x%02hhX>") — "<0x" and one or two hex digits.
int parse_byte_piece(std::string_view piece) {
  if (piece.size() < 4 || piece.substr(0, 3) != "<0x") return -1;
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int v = hex(piece[3]);
  if (v < 0) return -1;
  if (piece.size() > 4 && hex(piece[4]) >= 0) v = v * 16 + hex(piece[4]);
  return v;
}

template <typename T>
T read_le(const std::string& data, size_t offset) {
  T v;
  std::memcpy(&v, data.data() + offset, sizeof v);
  return v;
}

}  // namespace

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::load(const std::filesystem::path& path) {
  const std::string data = read_file_to_string(path);
  auto tok = std::unique_ptr<Llama2cTokenizer>(new Llama2cTokenizer());
  tok->source_ = path.string();
  const std::string& file = tok->source_;
  SPINDLE_CHECK(data.size() >= 4, format,
                "{}: {} bytes is too short for a llama2.c tokenizer (int32 max_token_length)", file,
                data.size());
  const auto max_len = read_le<int32_t>(data, 0);
  SPINDLE_CHECK(max_len > 0 && max_len <= (1 << 16), format,
                "{}: max_token_length {} is implausible (expected 1..65536); not a llama2.c "
                "tokenizer?",
                file, max_len);
  size_t offset = 4;
  while (offset < data.size()) {
    const size_t index = tok->pieces_.size();
    SPINDLE_CHECK(data.size() - offset >= 8, format,
                  "{}: token record {} at byte offset {} is truncated ({} bytes left, need 8 for "
                  "score and length)",
                  file, index, offset, data.size() - offset);
    const auto score = read_le<float>(data, offset);
    const auto len = read_le<int32_t>(data, offset + 4);
    SPINDLE_CHECK(len >= 0 && len <= max_len, format,
                  "{}: token record {} at byte offset {}: length {} outside [0, max_token_length "
                  "{}]",
                  file, index, offset, len, max_len);
    offset += 8;
    SPINDLE_CHECK(data.size() - offset >= static_cast<size_t>(len), format,
                  "{}: token record {} at byte offset {} is truncated: {} bytes of text declared, "
                  "{} left",
                  file, index, offset - 8, len, data.size() - offset);
    tok->pieces_.emplace_back(data.substr(offset, static_cast<size_t>(len)));
    tok->scores_.push_back(score);
    offset += static_cast<size_t>(len);
  }
  const size_t n = tok->pieces_.size();
  SPINDLE_CHECK(n >= 259, format,
                "{}: {} tokens; a llama2.c vocabulary needs at least 259 (<unk>, BOS, EOS and "
                "the 256 byte tokens)",
                file, n);
  tok->byte_of_piece_.resize(n);
  tok->ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    tok->byte_of_piece_[i] = parse_byte_piece(tok->pieces_[i]);
    tok->ids_.emplace(tok->pieces_[i], static_cast<int32_t>(i));  // duplicates: lowest id kept
  }
  return tok;
}

std::optional<int32_t> Llama2cTokenizer::lookup(std::string_view piece) const {
  const auto it = ids_.find(piece);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> Llama2cTokenizer::token_id(std::string_view piece) const {
  return lookup(piece);
}

// run.c repeatedly merges the adjacent pair whose concatenated piece is in the vocab with the
// highest score (strictly above -1e10; the leftmost pair on ties) until none is left. A heap of
// candidate pairs keyed by (score desc, position asc) performs the same sequence of merges:
// positions are the left token's original index, which keeps the current left-to-right order,
// and every current pair is in the heap; entries whose tokens changed are skipped when popped.
void Llama2cTokenizer::merge(std::vector<int32_t>& tokens) const {
  const auto n = static_cast<int32_t>(tokens.size());
  if (n < 2) return;
  std::vector<int32_t> next(tokens.size()), prev(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    float score;
    int32_t pos, left, right, merged;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score < b.score : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  std::string concat;
  const auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const int32_t l = tokens[pos], r = tokens[next[pos]];
    concat.assign(pieces_[l]).append(pieces_[r]);
    const auto id = lookup(concat);
    if (id && scores_[*id] > -1e10f) queue.push({scores_[*id], pos, l, r, *id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t right = next[c.pos];
    if (tokens[c.pos] != c.left || right < 0 || tokens[right] != c.right) continue;
    tokens[c.pos] = c.merged;
    tokens[right] = -1;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  std::erase(tokens, -1);
}

void Llama2cTokenizer::encode_segment(std::string_view text, bool dummy_prefix,
                                      std::vector<int32_t>& tokens) const {
  const size_t first = tokens.size();
  if (!text.empty() && dummy_prefix) tokens.push_back(lookup(" ").value_or(kByteOffset + ' '));
  const auto is_continuation = [](char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; };
  std::string buf;  // one UTF-8 character (or a run of up to 4 stray bytes), as run.c groups
  for (size_t i = 0; i < text.size(); ++i) {
    buf.push_back(text[i]);
    if (i + 1 < text.size() && is_continuation(text[i + 1]) && buf.size() < 4) continue;
    if (const auto id = lookup(buf)) {
      tokens.push_back(*id);
    } else {
      for (const char c : buf) tokens.push_back(static_cast<uint8_t>(c) + kByteOffset);
    }
    buf.clear();
  }
  std::vector<int32_t> segment(tokens.begin() + std::ptrdiff_t(first), tokens.end());
  merge(segment);
  tokens.resize(first);
  tokens.insert(tokens.end(), segment.begin(), segment.end());
}

std::vector<int32_t> Llama2cTokenizer::encode(std::string_view text,
                                              const EncodeOptions& opts) const {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size() + 2);
  if (opts.add_special_tokens) tokens.push_back(kBos);
  if (!opts.parse_special) {
    encode_segment(text, true, tokens);
    return tokens;
  }
  // Special tokens written in the text ("<s>", "</s>", "<unk>") are those tokens, as Hugging
  // Face's Llama tokenizer reads them; only the text's start gets the dummy-prefix space.
  const std::vector<SpecialToken> specials = special_tokens();
  size_t at = 0;
  bool start = true;
  while (at <= text.size()) {
    size_t next = std::string_view::npos;
    const SpecialToken* hit = nullptr;
    for (const SpecialToken& s : specials) {
      const size_t p = text.find(s.text, at);
      if (p < next) {
        next = p;
        hit = &s;
      }
    }
    encode_segment(text.substr(at, next == std::string_view::npos ? text.size() - at : next - at),
                   start, tokens);
    if (!hit) break;
    tokens.push_back(hit->id);
    at = next + hit->text.size();
    start = false;
  }
  return tokens;
}

std::string Llama2cTokenizer::decode(std::span<const int32_t> ids, int32_t prev) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    SPINDLE_CHECK(id >= 0 && id < vocab_size(), invalid_argument,
                  "{}: cannot decode token id {} at position {}: vocabulary has {} tokens", source_,
                  id, i, vocab_size());
    std::string_view piece = pieces_[id];
    if (prev == kBos && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    const int byte = parse_byte_piece(piece);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(piece);
    }
    prev = id;
  }
  return out;
}

}  // namespace spindle::engine
