// Byte-level BPE on the real GPT-2 tokenizer.json: OpenAI goldens (GSM8K), multilingual goldens
// for the GPT-2, Llama 3 and Qwen2 pipelines, special tokens, round trips, thread safety.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <thread>

#include "bpe_golden_cases.h"
#include "shared_fixtures.h"
#include "spindle/engine/tokenizer.h"
#include "tokenizer_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using spindle::engine::EncodeOptions;
using spindle::engine::load_tokenizer;
using spindle::engine::Tokenizer;

namespace {

constexpr EncodeOptions kPlain{.add_special_tokens = false, .parse_special = false};

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

json split_then_byte_level(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           json::array({{{"type", "Split"},
                         {"pattern", {{"Regex", pattern}}},
                         {"behavior", "Isolated"},
                         {"invert", false}},
                        {{"type", "ByteLevel"},
                         {"add_prefix_space", false},
                         {"trim_offsets", true},
                         {"use_regex", false}}})}};
}

// The GPT-2 vocab/merges under Llama 3's or Qwen2's tokenizer.json pipeline.
std::unique_ptr<Tokenizer> variant(const fs::path& gpt2, const spindle::testing::TempDir& dir,
                                   const std::string& which) {
  json j = read_json(gpt2);
  if (which == "llama3") {
    j["pre_tokenizer"] = split_then_byte_level(kLlama3Pattern);
    j["model"]["ignore_merges"] = true;
  } else {
    j["pre_tokenizer"] = split_then_byte_level(kQwen2Pattern);
    j["normalizer"] = {{"type", "NFC"}};
  }
  return load_tokenizer(dir.write(which + ".json", j.dump()));
}

std::string all_bytes() {
  std::string s;
  for (int b = 0; b < 256; ++b) s.push_back(static_cast<char>(b));
  return s;
}

}  // namespace

class Gpt2Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = spindle::testing::shared_dir() / "models/gpt2-tokenizer/tokenizer.json";
    if (!fs::exists(path_)) GTEST_SKIP() << "fixture missing: " << path_;
    if (!tok_) tok_ = load_tokenizer(path_);
  }
  static void TearDownTestSuite() { tok_.reset(); }
  fs::path path_;
  static std::unique_ptr<Tokenizer> tok_;
};
std::unique_ptr<Tokenizer> Gpt2Tokenizer::tok_;

TEST_F(Gpt2Tokenizer, GoldenGsm8kFirst200) {
  std::ifstream in(path_.parent_path() / "golden_gsm8k_test_first200.jsonl");
  ASSERT_TRUE(in) << "golden_gsm8k_test_first200.jsonl missing";
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const json rec = json::parse(line);
    const auto text = rec["text"].get<std::string>();
    const auto expected = rec["ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(tok_->encode(text), expected) << "line " << n << ": " << text;
    EXPECT_EQ(tok_->decode(expected), text) << "line " << n;
    ++n;
  }
  EXPECT_EQ(n, 200);
}

TEST_F(Gpt2Tokenizer, MultilingualGoldens) {
  for (const auto& c : bpe_golden_cases()) {
    EXPECT_EQ(tok_->encode(c.text), c.gpt2) << c.name;
    EXPECT_EQ(tok_->decode(c.gpt2), c.text) << c.name;
  }
}

TEST_F(Gpt2Tokenizer, Llama3AndQwen2PipelinesMatchGoldens) {
  spindle::testing::TempDir dir;
  const auto llama3 = variant(path_, dir, "llama3");
  const auto qwen2 = variant(path_, dir, "qwen2");
  for (const auto& c : bpe_golden_cases()) {
    EXPECT_EQ(llama3->encode(c.text), c.llama3) << c.name;
    EXPECT_EQ(qwen2->encode(c.text), c.qwen2) << c.name;
  }
}

TEST_F(Gpt2Tokenizer, Metadata) {
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->token_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok_->token_id("Ġthe"), 262);
  EXPECT_EQ(tok_->token_id("no such piece"), std::nullopt);
  EXPECT_EQ(tok_->bos_id(), std::nullopt);  // no template, no tokenizer_config.json
}

TEST_F(Gpt2Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
  const std::string text = "Hello<|endoftext|> world";
  const auto ids = tok_->encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{15496, 50256, 995}));
  EXPECT_EQ(tok_->decode(ids), text);
  const auto literal = tok_->encode(text, kPlain);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 50256), 0);
  EXPECT_EQ(tok_->decode(literal), text);
  EXPECT_EQ(tok_->encode("<|endoftext|>"), (std::vector<int32_t>{50256}));
}

TEST_F(Gpt2Tokenizer, EmptyText) {
  EXPECT_TRUE(tok_->encode("").empty());
  EXPECT_EQ(tok_->decode({}), "");
}

TEST_F(Gpt2Tokenizer, InvalidUtf8RoundTrips) {
  const std::vector<std::string> texts = {
      "\x80",                       // lone continuation byte
      "abc\xbf\xbf def",            // continuation bytes inside text
      "truncated \xe4\xb8",         // truncated 3-byte sequence at the end
      "\xe4\xb8 mid",               // truncated sequence then space
      "\xff\xfe",                   // never valid in UTF-8
      "ok \xc0\xaf overlong",       // overlong '/'
      "\xed\xa0\x80 surrogate",     // UTF-16 surrogate
      "\xf4\x90\x80\x80 too big",   // above U+10FFFF
      "mixed 你\xff好\x80 end",
      std::string("nul\0byte", 8),
      all_bytes(),
  };
  for (const auto& t : texts) {
    const auto ids = tok_->encode(t);
    EXPECT_EQ(tok_->decode(ids), t);
  }
  // An invalid byte is its own pre-token: neighbours encode as without it.
  EXPECT_EQ(tok_->encode("\xff"), (std::vector<int32_t>{*tok_->token_id("ÿ")}));
}

TEST_F(Gpt2Tokenizer, DecodeOfSpansConcatenates) {
  const std::string text = "Grüße 👨‍👩‍👧 日本語 \xff end";
  const auto ids = tok_->encode(text);
  ASSERT_GT(ids.size(), 6u);
  const std::span<const int32_t> all(ids);
  for (size_t cut = 0; cut <= ids.size(); ++cut) {
    EXPECT_EQ(tok_->decode(all.first(cut)) + tok_->decode(all.subspan(cut)), text) << cut;
  }
}

TEST_F(Gpt2Tokenizer, DecodeRejectsUnknownIds) {
  const std::vector<int32_t> bad{15496, 50257};
  EXPECT_SPINDLE_ERROR(tok_->decode(bad), invalid_argument, "token id 50257 at position 1");
  const std::vector<int32_t> negative{-1};
  EXPECT_SPINDLE_ERROR(tok_->decode(negative), invalid_argument, "token id -1");
}

TEST_F(Gpt2Tokenizer, LongInputs) {
  const std::string spaces(20000, ' ');
  EXPECT_EQ(tok_->decode(tok_->encode(spaces + "x" + spaces)), spaces + "x" + spaces);
  std::string garbage;
  for (int i = 0; i < 5000; ++i) garbage += "\xe4\xb8\xff!";
  EXPECT_EQ(tok_->decode(tok_->encode(garbage)), garbage);
}

TEST_F(Gpt2Tokenizer, ConcurrentEncodeGivesSameIds) {
  std::vector<std::string> texts;
  for (const auto& c : bpe_golden_cases()) texts.push_back(c.text);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok_->encode(t));
  std::atomic<int> mismatches{0};
  const auto worker = [&] {
    for (int round = 0; round < 20; ++round) {
      for (size_t i = 0; i < texts.size(); ++i) {
        if (tok_->encode(texts[i]) != expected[i]) ++mismatches;
        if (tok_->decode(expected[i]) != texts[i]) ++mismatches;
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(Gpt2Tokenizer, RandomBytesRoundTrip) {
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"a", " ", "  ", "\n", "'s", "9", "é", "日", "👍",
                                          "\xcc\x81", "\xe2\x80\x8d", "<|endoftext|>"};
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 64);
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0) {
        text.push_back(static_cast<char>(rng() & 0xFF));
      } else {
        text += atoms[rng() % atoms.size()];
      }
    }
    for (const auto& opts : {EncodeOptions{}, kPlain}) {
      ASSERT_EQ(tok_->decode(tok_->encode(text, opts)), text) << "round " << round;
    }
  }
}
