#pragma once
// A byte-level tokenizer written as a real Hugging Face tokenizer.json, for bases Spindle
// builds from scratch (`spindle make-base`). Ids 0..255 are the bytes themselves, spelled with
// GPT-2's bytes_to_unicode characters as a BPE vocab with no merges; the specials follow as
// added tokens. ByteLevel pre-tokenizer (no prefix space) and decoder; a TemplateProcessing
// post-processor prepends BOS when special tokens are added. Loads with load_tokenizer and with
// HF tokenizers / transformers (tokenizer_config.json names bos/eos).

#include <cstdint>
#include <filesystem>
#include <string>

namespace spindle::engine {

struct ByteTokenizerSpec {
  std::string bos_token = "<|bos|>";  // id 256
  std::string eos_token = "<|eos|>";  // id 257
  int64_t model_max_length = 0;       // tokenizer_config.json; 0 = omitted
};

inline constexpr int32_t kByteTokenizerBosId = 256;
inline constexpr int32_t kByteTokenizerEosId = 257;
inline constexpr int32_t kByteTokenizerVocabSize = 258;

// tokenizer.json text.
std::string byte_tokenizer_json(const ByteTokenizerSpec& spec = {});
// tokenizer_config.json text (bos_token, eos_token, tokenizer_class).
std::string byte_tokenizer_config_json(const ByteTokenizerSpec& spec = {});

// Writes dir/tokenizer.json and dir/tokenizer_config.json (each atomically; dir must exist).
void write_byte_tokenizer(const std::filesystem::path& dir, const ByteTokenizerSpec& spec = {});

}  // namespace spindle::engine
