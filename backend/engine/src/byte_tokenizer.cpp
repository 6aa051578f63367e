#include "spindle/engine/byte_tokenizer.h"

#include <nlohmann/json.hpp>

#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "tokenizer_bpe.h"
#include "utf8.h"

namespace spindle::engine {
namespace {

using json = nlohmann::ordered_json;

json added_token(int32_t id, const std::string& content) {
  return {{"id", id},           {"content", content}, {"single_word", false},
          {"lstrip", false},    {"rstrip", false},    {"normalized", false},
          {"special", true}};
}

json special(const std::string& name) { return {{"SpecialToken", {{"id", name}, {"type_id", 0}}}}; }
json sequence(const char* id, int type_id) {
  return {{"Sequence", {{"id", id}, {"type_id", type_id}}}};
}

}  // namespace

std::string byte_tokenizer_json(const ByteTokenizerSpec& spec) {
  SPINDLE_CHECK(!spec.bos_token.empty() && !spec.eos_token.empty() &&
                    spec.bos_token != spec.eos_token,
                invalid_argument, "byte tokenizer: bos '{}' and eos '{}' must be distinct, non-empty",
                spec.bos_token, spec.eos_token);
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string piece;
    utf8::append(piece, byte_to_unicode(static_cast<uint8_t>(b)));
    vocab[piece] = b;
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = json::array({added_token(kByteTokenizerBosId, spec.bos_token),
                                      added_token(kByteTokenizerEosId, spec.eos_token)});
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = byte_level;
  root["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({special(spec.bos_token), sequence("A", 0)})},
      {"pair", json::array({special(spec.bos_token), sequence("A", 0), sequence("B", 1)})},
      {"special_tokens",
       {{spec.bos_token,
         {{"id", spec.bos_token},
          {"ids", json::array({kByteTokenizerBosId})},
          {"tokens", json::array({spec.bos_token})}}}}}};
  root["decoder"] = byte_level;
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false},
                   {"vocab", vocab},
                   {"merges", json::array()}};
  return root.dump(2) + "\n";
}

std::string byte_tokenizer_config_json(const ByteTokenizerSpec& spec) {
  json root;
  root["tokenizer_class"] = "PreTrainedTokenizerFast";
  root["bos_token"] = spec.bos_token;
  root["eos_token"] = spec.eos_token;
  root["add_bos_token"] = true;
  root["clean_up_tokenization_spaces"] = false;
  if (spec.model_max_length > 0) root["model_max_length"] = spec.model_max_length;
  return root.dump(2) + "\n";
}

void write_byte_tokenizer(const std::filesystem::path& dir, const ByteTokenizerSpec& spec) {
  write_file_atomic(dir / "tokenizer.json", byte_tokenizer_json(spec));
  write_file_atomic(dir / "tokenizer_config.json", byte_tokenizer_config_json(spec));
}

}  // namespace spindle::engine
