// Handcrafted tokenizer.json files: Split behaviours, Sequence, ByteLevel prefix space,
// TemplateProcessing, added-token matching (longest first, lstrip/rstrip/single_word,
// normalized), ignore_merges, NFC, tokenizer_config.json, and malformed files.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "spindle/engine/tokenizer.h"
#include "tokenizer_test_util.h"

using nlohmann::json;
using spindle::engine::EncodeOptions;
using spindle::engine::load_tokenizer;
using spindle::engine::Tokenizer;
using Ids = std::vector<int32_t>;

namespace {

constexpr EncodeOptions kNoSpecial{.add_special_tokens = false};

// GPT-2's bytes_to_unicode for one byte, as UTF-8.
std::string byte_char(int b) {
  const auto printable = [](int x) {
    return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
  };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += printable(x) ? 0 : 1;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// Vocab: byte b -> id b (its byte-level character), then whole words from 256 on.
// Merges build "he", "hel", "hell", "hello" only.
const std::vector<std::string> kWords = {"the", "final", "countdown", "the-", "final-",
                                         "-final", "-countdown", "--", "Ġhello", "Ġworld",
                                         "he", "hel", "hell", "hello"};
int32_t word_id(const std::string& w) {
  return 256 + static_cast<int32_t>(std::find(kWords.begin(), kWords.end(), w) - kWords.begin());
}

json byte_level(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true}, {"use_regex", use_regex}};
}

json base_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  for (const auto& w : kWords) vocab[w] = word_id(w);
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level(false, true)},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", json::array({"h e", "he l", json::array({"hel", "l"}), "hell o"})},
            {"ignore_merges", false},
            {"byte_fallback", false},
            {"unk_token", nullptr}}}};
}

json split(json pattern, const char* behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

json added(int id, const std::string& content, bool special, json extra = json::object()) {
  json t = {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
            {"rstrip", false},   {"normalized", false}, {"special", special}};
  t.update(extra);
  return t;
}

class BpeConfig : public ::testing::Test {
 protected:
  std::unique_ptr<Tokenizer> load(const json& j) { return load_tokenizer(dir_.write("tokenizer.json", j.dump())); }
  spindle::testing::TempDir dir_;
};

Ids bytes_of(std::string_view s) {
  Ids ids;
  for (const char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

}  // namespace

TEST_F(BpeConfig, MergesByRank) {
  const auto tok = load(base_tokenizer());
  EXPECT_EQ(tok->encode("hello"), Ids{word_id("hello")});
  EXPECT_EQ(tok->encode("help"), (Ids{word_id("hel"), 'p'}));
  EXPECT_EQ(tok->encode("hhe"), (Ids{'h', word_id("he")}));
  EXPECT_EQ(tok->decode(tok->encode("hello help")), "hello help");
}

TEST_F(BpeConfig, SplitBehaviours) {
  // tokenizers' documented example: "the-final--countdown" split on "-".
  const std::string text = "the-final--countdown";
  const auto w = word_id;
  const std::vector<std::pair<const char*, Ids>> cases = {
      {"Removed", {w("the"), w("final"), w("countdown")}},
      {"Isolated", {w("the"), '-', w("final"), '-', '-', w("countdown")}},
      {"MergedWithPrevious", {w("the-"), w("final-"), '-', w("countdown")}},
      {"MergedWithNext", {w("the"), w("-final"), '-', w("-countdown")}},
      {"Contiguous", {w("the"), '-', w("final"), w("--"), w("countdown")}},
  };
  for (const json& pattern : {json{{"String", "-"}}, json{{"Regex", "-"}}}) {
    for (const auto& [behavior, expected] : cases) {
      json j = base_tokenizer();
      j["model"]["ignore_merges"] = true;  // a pre-token in the vocab shows up whole
      j["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", json::array({split(pattern, behavior), byte_level(false, false)})}};
      const auto tok = load(j);
      EXPECT_EQ(tok->encode(text), expected) << behavior << " " << pattern.dump();
    }
  }
  // invert: the gaps are the delimiters, so Removed keeps only the dashes.
  json j = base_tokenizer();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({split({{"Regex", "-+"}}, "Removed", /*invert=*/true),
                                                       byte_level(false, false)})}};
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j)->encode(text), (Ids{'-', word_id("--")}));
}

TEST_F(BpeConfig, ByteLevelPrefixSpaceAppliesToEachPiece) {
  json j = base_tokenizer();
  j["model"]["ignore_merges"] = true;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({split({{"String", "|"}}, "Removed"),
                                                       byte_level(true, false)})}};
  EXPECT_EQ(load(j)->encode("hello| world"), (Ids{word_id("Ġhello"), word_id("Ġworld")}));
}

TEST_F(BpeConfig, IgnoreMerges) {
  json j = base_tokenizer();
  j["model"]["merges"] = json::array();
  EXPECT_EQ(load(j)->encode("hello"), bytes_of("hello"));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j)->encode("hello"), Ids{word_id("hello")});
}

TEST_F(BpeConfig, TemplateProcessingAddsSpecialTokens) {
  json j = base_tokenizer();
  j["added_tokens"] = json::array({added(300, "<bos>", true), added(301, "<eos>", true)});
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({byte_level(false, false),
                    {{"type", "TemplateProcessing"},
                     {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                     {"pair", json::array()},
                     {"special_tokens",
                      {{"<bos>", {{"id", "<bos>"}, {"ids", {300}}, {"tokens", {"<bos>"}}}}}}}})}};
  const auto tok = load(j);
  EXPECT_EQ(tok->bos_id(), 300);
  EXPECT_EQ(tok->eos_id(), std::nullopt);
  EXPECT_EQ(tok->vocab_size(), 302);
  EXPECT_EQ(tok->encode("hello"), (Ids{300, word_id("hello")}));
  EXPECT_EQ(tok->encode(""), Ids{300});
  EXPECT_EQ(tok->encode("hello", kNoSpecial), Ids{word_id("hello")});
  EXPECT_EQ(tok->encode("hello<eos>"), (Ids{300, word_id("hello"), 301}));
  EXPECT_EQ(tok->decode(Ids{300, word_id("hello"), 301}), "<bos>hello<eos>");
}

TEST_F(BpeConfig, AddedTokensLongestMatchAndStrip) {
  json j = base_tokenizer();
  j["added_tokens"] = json::array({
      added(300, "<a>", true),
      added(301, "<a><b>", true),                       // longer match wins
      added(302, "<mask>", false, {{"lstrip", true}}),  // swallows spaces before it
      added(303, "<sep>", false, {{"rstrip", true}}),   // ... after it
      added(304, "<w>", false, {{"single_word", true}}),
  });
  const auto tok = load(j);
  EXPECT_EQ(tok->encode("<a><b><a>"), (Ids{301, 300}));
  EXPECT_EQ(tok->encode("x  \t<mask>y"), (Ids{'x', 302, 'y'}));
  EXPECT_EQ(tok->encode("x<sep> \n y"), (Ids{'x', 303, 'y'}));
  EXPECT_EQ(tok->encode("x <w> y"), (Ids{'x', ' ', 304, ' ', 'y'}));
  const auto inside_word = tok->encode("x<w>y");
  EXPECT_EQ(std::count(inside_word.begin(), inside_word.end(), 304), 0);
  EXPECT_EQ(tok->decode(inside_word), "x<w>y");
  // parse_special = false leaves special tokens as text but still matches non-special ones.
  const auto plain = tok->encode("<a> <mask>", {.add_special_tokens = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 300), 0);
  EXPECT_EQ(plain.back(), 302);
  EXPECT_EQ(tok->token_id("<mask>"), 302);
}

TEST_F(BpeConfig, NfcNormalizer) {
  json j = base_tokenizer();
  const std::string decomposed = "e\xcc\x81";  // e + COMBINING ACUTE ACCENT
  EXPECT_EQ(load(j)->encode(decomposed), bytes_of(decomposed));
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
  j["added_tokens"] = json::array({added(300, "caf\xc3\xa9", false, {{"normalized", true}})});
  const auto tok = load(j);
  EXPECT_EQ(tok->encode(decomposed), bytes_of("\xc3\xa9"));  // U+00E9
  EXPECT_EQ(tok->encode("cafe\xcc\x81!"), (Ids{300, '!'}));   // matched after normalizing
  const std::string invalid = "e\xcc\x81\xff\x80" "e\xcc\x81";   // invalid bytes pass through
  EXPECT_EQ(tok->decode(tok->encode(invalid)), "\xc3\xa9\xff\x80\xc3\xa9");
}

TEST_F(BpeConfig, TokenizerConfigNamesBosEos) {
  json j = base_tokenizer();
  j["added_tokens"] = json::array({added(300, "<s>", true), added(301, "</s>", true)});
  dir_.write("tokenizer_config.json",
             R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})");
  const auto tok = load(j);
  EXPECT_EQ(tok->bos_id(), 300);
  EXPECT_EQ(tok->eos_id(), 301);
}

TEST_F(BpeConfig, MalformedFilesNameTheProblem) {
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir_.write("tokenizer.json", "{ not json")), format,
                       "not valid JSON at byte");
  // A number past double's range is nlohmann's out_of_range, not a parse_error (found by the
  // tokenizer_json fuzzer): still a format error naming the file.
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir_.write("tokenizer.json", "22e444222")), format,
                       "tokenizer.json: not valid JSON: [json.exception.out_of_range.406]");
  json j = base_tokenizer();
  j["model"].erase("vocab");
  EXPECT_SPINDLE_ERROR(load(j), format, "model.vocab is missing");
  j = base_tokenizer();
  j["model"]["merges"].push_back("h zz");
  EXPECT_SPINDLE_ERROR(load(j), format, "model.merges[4] ('h' 'zz'): token 'zz' is not in model.vocab");
  j = base_tokenizer();
  j["model"]["merges"].push_back("a b c");
  EXPECT_SPINDLE_ERROR(load(j), format, "model.merges[4]");
  j = base_tokenizer();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_SPINDLE_ERROR(load(j), unsupported, "pre_tokenizer.type 'Whitespace'");
  j = base_tokenizer();
  j["pre_tokenizer"] = split({{"Regex", "("}}, "Isolated");
  EXPECT_SPINDLE_ERROR(load(j), format, "pre_tokenizer.pattern.Regex: regex does not compile");
  j = base_tokenizer();
  j["pre_tokenizer"] = split({{"Regex", "-"}}, "Isolated");
  EXPECT_SPINDLE_ERROR(load(j), unsupported, "must end with exactly one ByteLevel");
  j = base_tokenizer();
  j["model"]["byte_fallback"] = true;
  EXPECT_SPINDLE_ERROR(load(j), unsupported, "byte_fallback");
  j = base_tokenizer();
  j["model"]["type"] = "WordPiece";
  EXPECT_SPINDLE_ERROR(load(j), unsupported, "model.type 'WordPiece'");
  j = base_tokenizer();
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_SPINDLE_ERROR(load(j), unsupported, "normalizer.type 'NFKC'");
  j = base_tokenizer();
  j["post_processor"] = {{"type", "BertProcessing"}};
  EXPECT_SPINDLE_ERROR(load(j), unsupported, "post_processor.type 'BertProcessing'");
  j = base_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_SPINDLE_ERROR(load(j), unsupported, "decoder.type 'WordPiece'");
  j = base_tokenizer();
  j["model"]["vocab"]["bad"] = "seven";
  EXPECT_SPINDLE_ERROR(load(j), format, "model.vocab['bad'] must be a token id");
  j = base_tokenizer();
  j["added_tokens"] = json::array({json{{"id", 300}}});
  EXPECT_SPINDLE_ERROR(load(j), format, "added_tokens[0].content is missing");
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir_.path() / "absent.json"), not_found, "absent.json");
}

TEST_F(BpeConfig, MissingByteTokenIsAnEncodeError) {
  json j = base_tokenizer();
  j["model"]["vocab"].erase(byte_char(0xFF));
  const auto tok = load(j);
  EXPECT_EQ(tok->encode("hello"), Ids{word_id("hello")});
  EXPECT_SPINDLE_ERROR(tok->encode("\xff"), not_found, "byte 0xFF");
}
