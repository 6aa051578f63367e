#pragma once
// Tokenizers: text <-> token ids. Two implementations behind one interface:
//   - Llama2cTokenizer: llama2.c / sentencepiece-style score-merge (tok512.bin, tokenizer.bin)
//   - BpeTokenizer: Hugging Face byte-level BPE from tokenizer.json (GPT-2, Qwen, Llama 3)
// Thread-safety: a loaded tokenizer is immutable; encode/decode may be called concurrently.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::engine {

struct EncodeOptions {
  // Add the tokenizer's own special tokens as Hugging Face's add_special_tokens=True does
  // (llama2.c: BOS first; HF: the post_processor's template, e.g. Llama 3's <|begin_of_text|>).
  bool add_special_tokens = true;
  // Recognise special/added tokens written literally in the text ("<|endoftext|>").
  bool parse_special = true;
};

// A token that stands for itself, not for text: BOS/EOS, <|endoftext|>, chat markers.
struct SpecialToken {
  int32_t id = 0;
  std::string text;  // its written form ("<s>", "<|im_start|>")
  bool operator==(const SpecialToken&) const = default;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const = 0;

  // Bytes of `ids` as text. `prev` is the token before ids[0] (-1: none); llama2.c drops the
  // leading space of the first piece after BOS. The result is raw bytes: token sequences that
  // split a UTF-8 character yield the partial bytes (never replaced), so concatenating the
  // decodes of consecutive spans gives the decode of the whole.
  virtual std::string decode(std::span<const int32_t> ids, int32_t prev = -1) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // Token id for an exact piece/token string, if it exists (e.g. "<|endoftext|>").
  virtual std::optional<int32_t> token_id(std::string_view piece) const = 0;
  // The special tokens, by id (Hugging Face: added tokens marked special; llama2.c: <unk>,
  // <s>, </s>).
  virtual std::vector<SpecialToken> special_tokens() const = 0;
  // "bpe" (tokenizer.json) or "llama2c".
  virtual const char* kind() const = 0;
};

// tokenizer.json -> BpeTokenizer; any other file -> llama2.c binary format.
// Errors name the file and what was wrong (spindle::Error).
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

// A tokenizer.json's text -> BpeTokenizer (no tokenizer_config.json: bos/eos come from the
// post-processor only). Errors name `source`. Pure: the fuzz target calls it directly.
std::unique_ptr<Tokenizer> tokenizer_from_json(const std::string& text, const std::string& source);

// Default tokenizer for a model path: tokenizer.json (or tokenizer.bin) inside an HF
// directory; tokenizer.bin or tok*.bin beside a llama2.c .bin. Throws not_found if none.
std::filesystem::path default_tokenizer_path(const std::filesystem::path& model_path);

}  // namespace spindle::engine
