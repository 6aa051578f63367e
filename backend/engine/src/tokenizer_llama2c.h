#pragma once
// llama2.c's tokenizer (run.c): sentencepiece-style pieces with scores, merged greedily by
// score. File: int32 max_token_length, then per token until EOF: float32 score, int32 length,
// `length` bytes. Ids: 0 <unk>, 1 BOS, 2 EOS, 3..258 the bytes <0x00>..<0xFF>.
//
// Thread-safety: immutable after load.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spindle/engine/tokenizer.h"
#include "tokenizer_token_map.h"

namespace spindle::engine {

class Llama2cTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 1;
  static constexpr int32_t kEos = 2;
  static constexpr int32_t kByteOffset = 3;  // id of byte b is b + 3

  // Throws format naming the file and record index for truncated or implausible records,
  // not_found / io from reading the file.
  static std::unique_ptr<Llama2cTokenizer> load(const std::filesystem::path& path);

  // As llama2.c encode(text, bos = add_special_tokens, eos = 0): BOS, a dummy-prefix " ",
  // each UTF-8 character's piece (or its bytes), then greedy best-score pair merges.
  // Unlike run.c, a NUL byte does not end the text: it is encoded as <0x00>.
  // parse_special has no effect (llama2.c never parses special tokens from text).
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  // As llama2.c decode(prev, token) per token; BOS/EOS decode to their pieces.
  std::string decode(std::span<const int32_t> ids, int32_t prev = -1) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
  std::optional<int32_t> token_id(std::string_view piece) const override;
  std::vector<SpecialToken> special_tokens() const override {
    return {{0, "<unk>"}, {kBos, "<s>"}, {kEos, "</s>"}};
  }
  const char* kind() const override { return "llama2c"; }

 private:
  // Appends the ids of plain `text` (no special tokens), merged; the dummy-prefix space first
  // when `dummy_prefix` and the text is not empty.
  void encode_segment(std::string_view text, bool dummy_prefix, std::vector<int32_t>& tokens) const;
  Llama2cTokenizer() = default;
  // Merges adjacent tokens in place exactly as run.c's loop would (see the .cpp).
  void merge(std::vector<int32_t>& tokens) const;
  std::optional<int32_t> lookup(std::string_view piece) const;

  std::string source_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int> byte_of_piece_;  // b for pieces "<0xXX>", else -1
  TokenMap ids_;                    // piece -> lowest id with that piece
};

}  // namespace spindle::engine
