#pragma once
// Hugging Face byte-level BPE (GPT-2, Qwen2/Qwen3, Llama 3 tokenizer.json).
//
// encode pipeline (tokenizers' TokenizerImpl::encode_single_sequence):
//   1. split the raw text on added tokens with normalized == false;
//   2. NFC-normalize the pieces between them (when the normalizer asks), split those on the
//      added tokens with normalized == true;
//   3. pre-tokenize the remaining pieces (Split / ByteLevel);
//   4. map each pre-token's bytes to GPT-2's byte-level characters and apply BPE merges by rank
//      (ignore_merges: a pre-token found whole in the vocab is one token);
//   5. with add_special_tokens, wrap the ids in the post-processor's `single` template.
// decode maps byte-level characters back to bytes; added tokens decode to their content.
//
// Thread-safety: immutable after construction; encode/decode allocate per-call scratch.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpe_added_tokens.h"
#include "bpe_pretokenize.h"
#include "spindle/engine/tokenizer.h"
#include "tokenizer_token_map.h"

namespace spindle::engine {

// One item of a TemplateProcessing `single` template: the input sequence or fixed ids.
struct TemplatePiece {
  bool is_sequence = false;
  std::vector<int32_t> ids;  // SpecialToken ids (empty for the sequence)
};

// Everything tokenizer.json says, validated (see parse_tokenizer_json).
struct BpeSpec {
  std::string source;  // file name for error messages
  TokenMap vocab;      // model.vocab: byte-level piece -> id
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
  bool ignore_merges = false;
  std::optional<std::string> unk_token;
  std::vector<AddedToken> added_tokens;
  bool normalize_nfc = false;
  PreTokenizer pre_tokenizer;  // ends with a ByteLevel step
  std::optional<std::vector<TemplatePiece>> single_template;
  std::optional<std::string> bos_token, eos_token;  // from tokenizer_config.json, if any
};

// Parses and validates a tokenizer.json (and tokenizer_config.json beside it, when present).
// Throws spindle::Error naming the file and the field: format (bad JSON, wrong types, merges
// naming unknown tokens), unsupported (model/normalizer/pre_tokenizer/post_processor/decoder
// types this implementation does not handle, byte_fallback).
BpeSpec parse_tokenizer_json(const std::filesystem::path& path);
// The same for tokenizer.json's text alone (no tokenizer_config.json); `source` names it in
// errors.
BpeSpec parse_tokenizer_json_text(const std::string& text, const std::string& source);

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws format when merges reference tokens missing from the vocab.
  explicit BpeTokenizer(BpeSpec spec);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  std::string decode(std::span<const int32_t> ids, int32_t prev = -1) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::optional<int32_t> token_id(std::string_view piece) const override;
  std::vector<SpecialToken> special_tokens() const override { return specials_; }
  const char* kind() const override { return "bpe"; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct Scratch;

  // Appends the ids of one pre-token (raw bytes) to `out`.
  void encode_pretoken(std::string_view bytes, Scratch& scratch, std::vector<int32_t>& out) const;
  // BPE over the symbol ids in scratch (in place).
  void merge_symbols(Scratch& scratch) const;
  std::optional<Merge> find_merge(int32_t left, int32_t right) const;

  std::string source_;
  TokenMap vocab_;
  TokenMap added_by_content_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_id_;
  int32_t byte_ids_[256];              // vocab id of each byte's byte-level character, or -1
  std::string byte_chars_[256];        // UTF-8 of each byte's byte-level character
  std::vector<std::string> id_bytes_;  // decode result of each id
  std::vector<uint8_t> id_known_;      // whether id is a vocab or added token
  bool normalize_nfc_ = false;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized == true
  PreTokenizer pre_tokenizer_;
  std::optional<std::vector<TemplatePiece>> single_template_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
  std::vector<SpecialToken> specials_;  // added tokens marked special, by id
};

// GPT-2's bytes_to_unicode: the code point each byte is written as in a byte-level vocab.
char32_t byte_to_unicode(uint8_t byte);

}  // namespace spindle::engine
