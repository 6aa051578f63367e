// llama2.c tokenizer (tok512.bin from stories260K): golden encode, decode rules, round trips,
// malformed files.

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "shared_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/engine/tokenizer.h"
#include "tokenizer_test_util.h"

namespace fs = std::filesystem;
using spindle::engine::EncodeOptions;
using spindle::engine::load_tokenizer;

TEST(Llama2cTokenizer, GoldenOnceUponATime) {
  SPINDLE_SHARED_OR_SKIP(path, "models/stories260K/tok512.bin");
  const auto tok = load_tokenizer(path);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->encode("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->encode("Once upon a time", {.add_special_tokens = false}),
            (std::vector<int32_t>{403, 407, 261, 378}));
  const std::vector<int32_t> ids{1, 403, 407, 261, 378};
  // After BOS the leading space of the first piece is dropped (run.c decode).
  EXPECT_EQ(tok->decode(std::span(ids).subspan(1), /*prev=*/1), "Once upon a time");
  EXPECT_EQ(tok->decode(std::span(ids).subspan(1)), " Once upon a time");
  EXPECT_EQ(tok->decode(ids), "\n<s>\nOnce upon a time");
}

namespace {

// run.c's encode, transcribed literally (sorted-vocab bsearch replaced by a linear map lookup),
// as the reference for the heap-based merge.
struct RunCReference {
  std::vector<std::string> vocab;
  std::vector<float> scores;
  std::map<std::string, int> index;

  explicit RunCReference(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    int32_t max_len = 0;
    in.read(reinterpret_cast<char*>(&max_len), 4);
    float score;
    int32_t len;
    while (in.read(reinterpret_cast<char*>(&score), 4) && in.read(reinterpret_cast<char*>(&len), 4)) {
      std::string s(static_cast<size_t>(len), '\0');
      in.read(s.data(), len);
      index.emplace(s, static_cast<int>(vocab.size()));
      vocab.push_back(s);
      scores.push_back(score);
    }
  }
  int lookup(const std::string& s) const {
    const auto it = index.find(s);
    return it == index.end() ? -1 : it->second;
  }
  std::vector<int32_t> encode(const std::string& text) const {
    std::vector<int32_t> tokens{1};
    if (!text.empty()) tokens.push_back(lookup(" "));
    std::string buf;
    for (size_t i = 0; i < text.size(); ++i) {
      if ((text[i] & 0xC0) != 0x80) buf.clear();
      buf.push_back(text[i]);
      if (i + 1 < text.size() && (text[i + 1] & 0xC0) == 0x80 && buf.size() < 4) continue;
      const int id = lookup(buf);
      if (id != -1) {
        tokens.push_back(id);
      } else {
        for (const char c : buf) tokens.push_back(static_cast<uint8_t>(c) + 3);
      }
      buf.clear();
    }
    while (true) {
      float best_score = -1e10f;
      int best_id = -1, best_idx = -1;
      for (size_t i = 0; i + 1 < tokens.size(); ++i) {
        const int id = lookup(vocab[tokens[i]] + vocab[tokens[i + 1]]);
        if (id != -1 && scores[id] > best_score) {
          best_score = scores[id];
          best_id = id;
          best_idx = static_cast<int>(i);
        }
      }
      if (best_idx == -1) break;
      tokens[best_idx] = best_id;
      tokens.erase(tokens.begin() + best_idx + 1);
    }
    return tokens;
  }
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST(Llama2cTokenizer, MatchesRunCOnRandomText) {
  SPINDLE_SHARED_OR_SKIP(path, "models/stories260K/tok512.bin");
  const auto tok = load_tokenizer(path);
  const RunCReference ref(path);
  const std::vector<std::string> atoms = {"Once", " upon", " a", " time", " the", "the", " Lily",
                                          "  ", "\n", ".", ",", "!", "a", "e", "ee", "th", "é",
                                          "日本", "👍", "\xff", "\x80", "\xe4\xb8", "'s", "1", "23"};
  std::mt19937 rng(42);
  for (int round = 0; round < 500; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    ASSERT_EQ(tok->encode(text), ref.encode(text)) << "text: " << text;
  }
  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "sunshine. One day, she saw a big, red ball in the park.";
  EXPECT_EQ(tok->encode(story), ref.encode(story));
}

TEST(Llama2cTokenizer, RoundTripsUtf8AndInvalidBytes) {
  SPINDLE_SHARED_OR_SKIP(path, "models/stories260K/tok512.bin");
  const auto tok = load_tokenizer(path);
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      " leading space and trailing  ",
      "Grüße, 日本語, مرحبا, नमस्ते, 👨‍👩‍👧‍👦",
      "\x80 lone continuation",
      "truncated \xe4\xb8",
      "\xff\xfe\xfd",
      "\x80\x80\x80\x80\x80\x80",  // run.c groups stray bytes by four
      std::string("nul\0byte", 8),
  };
  for (const auto& t : texts) {
    const auto ids = tok->encode(t);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 1);
    EXPECT_EQ(tok->decode(std::span(ids).subspan(1), /*prev=*/1), t);
    // Decoding span by span (prev = the token before each span) gives the same text.
    std::string pieces;
    for (size_t i = 1; i < ids.size(); ++i) pieces += tok->decode(std::span(ids).subspan(i, 1), ids[i - 1]);
    EXPECT_EQ(pieces, t);
  }
  EXPECT_EQ(tok->encode(""), std::vector<int32_t>{1});
  EXPECT_TRUE(tok->encode("", {.add_special_tokens = false}).empty());
  // Byte pieces decode to the raw byte.
  EXPECT_EQ(tok->decode(std::vector<int32_t>{3 + 0xFF, 3 + 'A'}), "\xff" "A");
}

TEST(Llama2cTokenizer, DecodeRejectsOutOfRangeIds) {
  SPINDLE_SHARED_OR_SKIP(path, "models/stories260K/tok512.bin");
  const auto tok = load_tokenizer(path);
  EXPECT_SPINDLE_ERROR(tok->decode(std::vector<int32_t>{403, 512}), invalid_argument,
                       "token id 512 at position 1");
  EXPECT_SPINDLE_ERROR(tok->decode(std::vector<int32_t>{-5}), invalid_argument, "token id -5");
  EXPECT_EQ(tok->token_id(" Once"), 403);
}

TEST(Llama2cTokenizer, MalformedFilesNameTheRecord) {
  SPINDLE_SHARED_OR_SKIP(path, "models/stories260K/tok512.bin");
  const std::string good = read_bytes(path);
  spindle::testing::TempDir dir;
  // Cut inside the text of some record, then inside a header.
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir.write("cut.bin", good.substr(0, good.size() - 2))),
                       format, "token record 511");
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir.write("cut_header.bin", good.substr(0, 4 + 13 + 3))), format,
                       "token record 1 at byte offset 17 is truncated");
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir.write("tiny.bin", "ab")), format, "too short");
  std::string bad_len = good;
  const int32_t huge = 1 << 20;
  std::memcpy(bad_len.data() + 4 + 4, &huge, 4);  // record 0's length
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir.write("bad_len.bin", bad_len)), format,
                       "token record 0 at byte offset 4: length 1048576");
  std::string small = good.substr(0, 4);
  for (int i = 0; i < 10; ++i) small += std::string("\0\0\0\0\1\0\0\0x", 9);
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir.write("small.bin", small)), format, "at least 259");
  EXPECT_SPINDLE_ERROR(load_tokenizer(dir.path() / "missing.bin"), not_found, "missing.bin");
}

TEST(TokenizerPaths, DefaultTokenizerPath) {
  spindle::testing::TempDir dir;
  const auto model = dir.write("model.bin", "x");
  EXPECT_SPINDLE_ERROR(spindle::engine::default_tokenizer_path(model), not_found, "tok*.bin");
  dir.write("tok512.bin", "x");
  dir.write("tok4096.bin", "x");
  EXPECT_EQ(spindle::engine::default_tokenizer_path(model), dir.path() / "tok4096.bin");
  dir.write("tokenizer.bin", "x");
  EXPECT_EQ(spindle::engine::default_tokenizer_path(model), dir.path() / "tokenizer.bin");
  // A model directory: tokenizer.json first, then tokenizer.bin.
  EXPECT_EQ(spindle::engine::default_tokenizer_path(dir.path()), dir.path() / "tokenizer.bin");
  dir.write("tokenizer.json", "{}");
  EXPECT_EQ(spindle::engine::default_tokenizer_path(dir.path()), dir.path() / "tokenizer.json");
  spindle::testing::TempDir empty;
  EXPECT_SPINDLE_ERROR(spindle::engine::default_tokenizer_path(empty.path()), not_found,
                       "tokenizer.json");
}

TEST(TokenizerPaths, Stories260KModelFindsTok512) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  EXPECT_EQ(spindle::engine::default_tokenizer_path(model).filename(), "tok512.bin");
}

TEST(Llama2cTokenizer, ConcurrentEncodeGivesSameIds) {
  SPINDLE_SHARED_OR_SKIP(path, "models/stories260K/tok512.bin");
  const auto tok = load_tokenizer(path);
  const std::vector<std::string> texts = {"Once upon a time", "Lily saw a big red ball.",
                                          "日本語 \xff", "The end.\n"};
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok->encode(t));
  std::atomic<int> mismatches{0};
  const auto worker = [&] {
    for (int round = 0; round < 200; ++round) {
      for (size_t i = 0; i < texts.size(); ++i) {
        if (tok->encode(texts[i]) != expected[i]) ++mismatches;
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Llama2cTokenizer, RandomBytesRoundTrip) {
  SPINDLE_SHARED_OR_SKIP(path, "models/stories260K/tok512.bin");
  const auto tok = load_tokenizer(path);
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 64);
    for (int i = 0; i < n; ++i) text.push_back(static_cast<char>(rng() % 3 ? 'a' + rng() % 26 : rng() & 0xFF));
    const auto ids = tok->encode(text);
    ASSERT_EQ(tok->decode(std::span(ids).subspan(1), /*prev=*/1), text) << "round " << round;
  }
}

// Special tokens written in the text are those tokens (Hugging Face's Llama tokenizer reads
// "<s>" so); parse_special = false keeps run.c's byte-level reading.
TEST(Llama2cTokenizer, SpecialTokensWrittenInTextAreRecognised) {
  SPINDLE_SHARED_OR_SKIP(path, "models/stories260K/tok512.bin");
  const auto tok = load_tokenizer(path);
  const EncodeOptions plain{.add_special_tokens = false};
  EXPECT_EQ(tok->encode("<s>", plain), (std::vector<int32_t>{1}));
  const std::vector<int32_t> once = tok->encode("Once upon a time", plain);
  std::vector<int32_t> expected = once;
  expected.push_back(2);
  EXPECT_EQ(tok->encode("Once upon a time</s>", plain), expected);
  // Only the text's start gets the dummy-prefix space: after a special token, "Once" is the
  // piece without it, as the text's own run.c encode of "Once" after BOS would not add one.
  const std::vector<int32_t> after = tok->encode("<s>Once", plain);
  ASSERT_GE(after.size(), 2u);
  EXPECT_EQ(after.front(), 1);
  EXPECT_EQ(tok->decode(std::span(after).subspan(1), 1), "Once");
  EXPECT_EQ(tok->encode("</s>", {.add_special_tokens = true}), (std::vector<int32_t>{1, 2}));
  const RunCReference ref(path);
  EXPECT_EQ(tok->encode("a <s> b", {.add_special_tokens = true, .parse_special = false}),
            ref.encode("a <s> b"));
  const auto specials = tok->special_tokens();
  ASSERT_EQ(specials.size(), 3u);
  EXPECT_EQ(specials[1].id, 1);
  EXPECT_EQ(specials[1].text, "<s>");
  EXPECT_STREQ(tok->kind(), "llama2c");
}
