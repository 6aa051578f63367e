#include "tokenizer_bpe.h"

#include <algorithm>
#include <array>
#include <queue>

#include "spindle/core/error.h"
#include "tokenizer_unicode.h"
#include "utf8.h"

namespace spindle::engine {
namespace {

constexpr uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Inverse of byte_to_unicode: byte-level code point -> byte, -1 for other code points.
int unicode_to_byte(char32_t cp) {
  static const auto table = [] {
    std::array<int16_t, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

// tokenizers' ByteLevel decoder for one token: its characters mapped back to bytes, or the
// token's own UTF-8 when any character is not a byte-level one.
std::string byte_level_decode(std::string_view token) {
  std::string out;
  size_t pos = 0;
  while (pos < token.size()) {
    const size_t n = utf8::char_length(token, pos);
    const int b = n == 0 ? -1 : unicode_to_byte(utf8::decode(token, pos, n));
    if (b < 0) return std::string(token);
    out.push_back(static_cast<char>(b));
    pos += n;
  }
  return out;
}

}  // namespace

char32_t byte_to_unicode(uint8_t byte) {
  // Printable Latin-1 bytes stand for themselves; the other 68 take U+0100.. in byte order.
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  if (printable(byte)) return byte;
  char32_t n = 0;
  for (int b = 0; b < byte; ++b) n += printable(b) ? 0 : 1;
  return 256 + n;
}

struct BpeTokenizer::Scratch {
  RegexScratch regex;
  std::vector<AddedSegment> raw_segments, norm_segments;
  std::vector<std::string> pretokens;
  std::string mapped;
  std::vector<int32_t> ids, prev, next;
};

BpeTokenizer::BpeTokenizer(BpeSpec spec)
    : source_(std::move(spec.source)),
      vocab_(std::move(spec.vocab)),
      ignore_merges_(spec.ignore_merges),
      normalize_nfc_(spec.normalize_nfc),
      pre_tokenizer_(std::move(spec.pre_tokenizer)),
      single_template_(std::move(spec.single_template)) {
  // Id space: vocab ids and added-token ids; holes are ids nobody uses.
  int32_t max_id = -1;
  for (const auto& [piece, id] : vocab_) max_id = std::max(max_id, id);
  for (const auto& t : spec.added_tokens) max_id = std::max(max_id, t.id);
  SPINDLE_CHECK(max_id >= 0, format, "{}: model.vocab is empty", source_);
  vocab_size_ = max_id + 1;
  id_bytes_.assign(static_cast<size_t>(vocab_size_), {});
  id_known_.assign(static_cast<size_t>(vocab_size_), 0);
  for (const auto& [piece, id] : vocab_) {
    SPINDLE_CHECK(!id_known_[id], format, "{}: model.vocab: id {} is used twice (again by '{}')",
                  source_, id, piece);
    id_known_[id] = 1;
    id_bytes_[id] = byte_level_decode(piece);
  }

  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string& a = spec.merges[rank].first;  // not a structured binding: Clang 14
    const std::string& b = spec.merges[rank].second;  // cannot capture one in the lambda
    const auto lookup = [&](const std::string& piece) {
      const auto it = vocab_.find(piece);
      SPINDLE_CHECK(it != vocab_.end(), format,
                    "{}: model.merges[{}] ('{}' '{}'): token '{}' is not in model.vocab", source_,
                    rank, a, b, piece);
      return it->second;
    };
    const int32_t left = lookup(a), right = lookup(b), merged = lookup(a + b);
    merges_[pair_key(left, right)] = Merge{static_cast<int32_t>(rank), merged};  // last wins
  }

  if (spec.unk_token) {
    const auto it = vocab_.find(*spec.unk_token);
    SPINDLE_CHECK(it != vocab_.end(), format, "{}: model.unk_token '{}' is not in model.vocab",
                  source_, *spec.unk_token);
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    byte_chars_[b].clear();
    utf8::append(byte_chars_[b], byte_to_unicode(static_cast<uint8_t>(b)));
    const auto it = vocab_.find(byte_chars_[b]);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<AddedToken> raw_tokens, norm_tokens;
  for (const auto& t : spec.added_tokens) {
    if (t.special) specials_.push_back({t.id, t.content});
    added_by_content_.emplace(t.content, t.id);  // first listed wins for token_id()
    id_known_[t.id] = 1;
    id_bytes_[t.id] = t.content;
    if (t.normalized) {
      norm_patterns.push_back(normalize_nfc_ ? nfc_normalize(t.content) : t.content);
      norm_tokens.push_back(t);
    } else {
      raw_patterns.push_back(t.content);
      raw_tokens.push_back(t);
    }
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw_patterns), std::move(raw_tokens));
  normalized_matcher_ = AddedTokenMatcher(std::move(norm_patterns), std::move(norm_tokens));

  if (single_template_) {
    for (const auto& piece : *single_template_) {
      for (const int32_t id : piece.ids) {
        SPINDLE_CHECK(id < vocab_size_ && id_known_[id], format,
                      "{}: post_processor template uses token id {}, which is not in the vocab",
                      source_, id);
      }
    }
  }

  // bos/eos: tokenizer_config.json when it names them; else what the files make evident.
  const auto resolve = [&](const std::optional<std::string>& name, const char* field) {
    std::optional<int32_t> id;
    if (name) {
      id = token_id(*name);
      SPINDLE_CHECK(id.has_value(), format, "{}: tokenizer_config.json {} '{}' is not a token",
                    source_, field, *name);
    }
    return id;
  };
  std::sort(specials_.begin(), specials_.end(),
            [](const SpecialToken& a, const SpecialToken& b) { return a.id < b.id; });
  specials_.erase(std::unique(specials_.begin(), specials_.end(),
                              [](const SpecialToken& a, const SpecialToken& b) { return a.id == b.id; }),
                  specials_.end());
  bos_id_ = resolve(spec.bos_token, "bos_token");
  eos_id_ = resolve(spec.eos_token, "eos_token");
  if (!bos_id_ && single_template_ && !single_template_->empty() &&
      !single_template_->front().is_sequence && single_template_->front().ids.size() == 1) {
    bos_id_ = single_template_->front().ids.front();  // Llama 3: <|begin_of_text|> leads
  }
  if (!eos_id_) {
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>"}) {
      if (const auto it = added_by_content_.find(std::string_view(name));
          it != added_by_content_.end()) {
        eos_id_ = it->second;
        break;
      }
    }
  }
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view piece) const {
  if (const auto it = added_by_content_.find(piece); it != added_by_content_.end()) return it->second;
  if (const auto it = vocab_.find(piece); it != vocab_.end()) return it->second;
  return std::nullopt;
}

std::optional<BpeTokenizer::Merge> BpeTokenizer::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  if (it == merges_.end()) return std::nullopt;
  return it->second;
}

void BpeTokenizer::merge_symbols(Scratch& s) const {
  auto& ids = s.ids;
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  s.prev.resize(ids.size());
  s.next.resize(ids.size());
  for (int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Lowest rank first; equal ranks (the same pair) leftmost first — tokenizers' Word::merge_all.
  struct Candidate {
    int32_t rank, pos, left, right, new_id;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto push = [&](int32_t pos) {
    if (pos < 0 || s.next[pos] < 0) return;
    const int32_t nx = s.next[pos];
    if (const auto m = find_merge(ids[pos], ids[nx])) {
      queue.push({m->rank, pos, ids[pos], ids[nx], m->new_id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t right = s.next[c.pos];
    // Stale entries: the left symbol was absorbed or changed, or its right neighbour changed.
    if (ids[c.pos] != c.left || right < 0 || ids[right] != c.right) continue;
    ids[c.pos] = c.new_id;
    ids[right] = -1;  // removed
    s.next[c.pos] = s.next[right];
    if (s.next[right] >= 0) s.prev[s.next[right]] = c.pos;
    if (s.prev[c.pos] >= 0) push(s.prev[c.pos]);
    push(c.pos);
  }
  std::erase(ids, -1);
}

void BpeTokenizer::encode_pretoken(std::string_view bytes, Scratch& s,
                                   std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    s.mapped.clear();
    for (const char c : bytes) s.mapped += byte_chars_[static_cast<uint8_t>(c)];
    if (const auto it = vocab_.find(s.mapped); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  s.ids.clear();
  for (const char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    if (byte_ids_[b] >= 0) {
      s.ids.push_back(byte_ids_[b]);
    } else {
      SPINDLE_CHECK(unk_id_.has_value(), not_found,
                    "{}: byte 0x{:02X} (byte-level character '{}') has no token in model.vocab "
                    "and there is no unk_token",
                    source_, b, byte_chars_[b]);
      s.ids.push_back(*unk_id_);
    }
  }
  merge_symbols(s);
  out.insert(out.end(), s.ids.begin(), s.ids.end());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  Scratch s;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  s.raw_segments.clear();
  raw_matcher_.split(text, opts.parse_special, s.raw_segments);
  for (const auto& raw : s.raw_segments) {
    if (raw.token_id >= 0) {
      ids.push_back(raw.token_id);
      continue;
    }
    const std::string normalized = normalize_nfc_ ? nfc_normalize(raw.text) : std::string(raw.text);
    s.norm_segments.clear();
    normalized_matcher_.split(normalized, opts.parse_special, s.norm_segments);
    for (const auto& seg : s.norm_segments) {
      if (seg.token_id >= 0) {
        ids.push_back(seg.token_id);
        continue;
      }
      s.pretokens.clear();
      pre_tokenizer_.run(seg.text, s.regex, s.pretokens);
      for (const auto& p : s.pretokens) encode_pretoken(p, s, ids);
    }
  }
  if (!opts.add_special_tokens || !single_template_) return ids;
  std::vector<int32_t> wrapped;
  wrapped.reserve(ids.size() + 4);
  for (const auto& piece : *single_template_) {
    const auto& src = piece.is_sequence ? ids : piece.ids;
    wrapped.insert(wrapped.end(), src.begin(), src.end());
  }
  return wrapped;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, int32_t /*prev*/) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    SPINDLE_CHECK(id >= 0 && id < vocab_size_ && id_known_[id], invalid_argument,
                  "{}: cannot decode token id {} at position {}: not in the vocabulary (size {})",
                  source_, id, i, vocab_size_);
    out += id_bytes_[id];
  }
  return out;
}

}  // namespace spindle::engine
