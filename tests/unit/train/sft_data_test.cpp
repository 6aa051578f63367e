// SFT JSONL rows -> TrainDatum (spindle/engine/train_data.h), over the byte-level tokenizer that
// make-base writes (spindle/engine/byte_tokenizer.h), which these tests also check loads.

#include <gtest/gtest.h>

#include <fstream>

#include "spindle/core/error.h"
#include "spindle/engine/byte_tokenizer.h"
#include "spindle/engine/train_data.h"

namespace spindle::engine {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("spindle_sft_data_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

class SftData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    write_byte_tokenizer(dir_);
    tok_ = load_tokenizer(dir_ / "tokenizer.json");
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& text) {
    const fs::path p = dir_ / "data.jsonl";
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // The message of the error loading `text` ("" when it loads).
  std::string error_of(const std::string& text, SftDataOptions opts = {}) {
    try {
      load_sft_jsonl(write(text), *tok_, opts);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  std::unique_ptr<Tokenizer> tok_;
};

std::vector<int32_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST_F(SftData, ByteTokenizerLoadsWithBosEosAndRoundTrips) {
  EXPECT_EQ(tok_->vocab_size(), kByteTokenizerVocabSize);
  EXPECT_EQ(tok_->bos_id(), kByteTokenizerBosId);
  EXPECT_EQ(tok_->eos_id(), kByteTokenizerEosId);
  std::vector<int32_t> want = {kByteTokenizerBosId};
  for (int32_t b : bytes("37+45=82")) want.push_back(b);
  EXPECT_EQ(tok_->encode("37+45=82"), want);
  EXPECT_EQ(tok_->encode("a b", {.add_special_tokens = false}), bytes("a b"));  // no prefix space
  EXPECT_EQ(tok_->encode("1<|eos|>", {.add_special_tokens = false}),
            (std::vector<int32_t>{'1', kByteTokenizerEosId}));
  const std::string utf8 = "h\xC3\xA9\xF0\x9F\x98\x80!";  // every byte is its own token
  const auto ids = tok_->encode(utf8, {.add_special_tokens = false});
  EXPECT_EQ(ids.size(), utf8.size());
  EXPECT_EQ(tok_->decode(ids), utf8);
}

TEST_F(SftData, CompletionDatumWeighsOnlyTheCompletionAndEos) {
  const TrainDatum d = completion_datum(*tok_, "1+2=", "3");
  const int32_t B = kByteTokenizerBosId, E = kByteTokenizerEosId;
  EXPECT_EQ(d.input_tokens, (std::vector<int32_t>{B, '1', '+', '2', '=', '3'}));
  EXPECT_EQ(d.target_tokens, (std::vector<int32_t>{'1', '+', '2', '=', '3', E}));
  EXPECT_EQ(d.weights, (std::vector<float>{0, 0, 0, 0, 1, 1}));
  // An empty prompt starts from BOS; an empty completion teaches nothing.
  EXPECT_EQ(completion_datum(*tok_, "", "x").input_tokens, (std::vector<int32_t>{B, 'x'}));
  EXPECT_THROW(completion_datum(*tok_, "p", ""), Error);
}

TEST_F(SftData, LoadsTextAndTokenRowsSkippingBlankLines) {
  const auto rows = load_sft_jsonl(
      write("{\"prompt\": \"ab\", \"completion\": \"c\"}\r\n\n   \n"
            "{\"input_tokens\": [1, 2, 3], \"target_tokens\": [2, 3, 4]}\n"
            "{\"input_tokens\": [5], \"target_tokens\": [6], \"weights\": [0.5]}"),
      *tok_, {});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].input_tokens, (std::vector<int32_t>{kByteTokenizerBosId, 'a', 'b', 'c'}));
  EXPECT_EQ(rows[0].weights, (std::vector<float>{0, 0, 1, 1}));
  EXPECT_EQ(rows[1].input_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(rows[1].target_tokens, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_TRUE(rows[1].weights.empty());  // 1 each
  EXPECT_EQ(rows[2].weights, (std::vector<float>{0.5f}));
}

TEST_F(SftData, BadRowsNameTheFileLineAndField) {
  const std::string ok = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
  const struct {
    std::string row;
    std::string expect;
    SftDataOptions opts;
  } cases[] = {
      {"{\"prompt\": \"a\"", "not valid JSON", {}},
      {"[1, 2]", "must be a JSON object", {}},
      {"{\"prompt\": \"a\", \"completions\": \"b\"}", "unknown key \"completions\"", {}},
      {"{\"prompt\": \"a\"}", "missing \"completion\"", {}},
      {"{\"prompt\": 3, \"completion\": \"b\"}", "\"prompt\" must be a string", {}},
      {"{\"prompt\": \"a\", \"completion\": \"\"}", "completion is empty", {}},
      {"{\"prompt\": \"a\", \"completion\": \"b\", \"input_tokens\": [1]}", "not both", {}},
      {"{\"input_tokens\": [1, 2], \"target_tokens\": [2]}", "1 target_tokens for 2", {}},
      {"{\"input_tokens\": [1], \"target_tokens\": [999]}", "\"target_tokens\"[0] = 999", {}},
      {"{\"input_tokens\": [-1], \"target_tokens\": [2]}", "\"input_tokens\"[0] = -1", {}},
      {"{\"input_tokens\": [1], \"target_tokens\": [2], \"weights\": [0]}", "every weight is 0", {}},
      {"{\"input_tokens\": [1], \"target_tokens\": [2], \"weights\": [1, 1]}", "2 weights for 1", {}},
      {"{\"input_tokens\": [], \"target_tokens\": []}", "\"input_tokens\" is empty", {}},
      {"{\"target_tokens\": [2]}", "needs \"input_tokens\"", {}},
      {"{\"prompt\": \"abcdef\", \"completion\": \"g\"}", "8 tokens do not fit the model's context of 4",
       {.max_len = 4}},
      {"{\"input_tokens\": [270], \"target_tokens\": [2]}", "in [0, 260)", {.vocab_size = 260}},
  };
  for (const auto& c : cases) {
    const std::string err = error_of(ok + "\n" + c.row + "\n" + ok, c.opts);
    EXPECT_NE(err.find("data.jsonl:3: "), std::string::npos) << c.row << " -> " << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.row << " -> " << err;
  }
}

TEST_F(SftData, EmptyOrMissingFilesAreErrors) {
  EXPECT_NE(error_of("").find("no training rows"), std::string::npos);
  EXPECT_NE(error_of("\n  \n").find("data.jsonl"), std::string::npos);
  try {
    load_sft_jsonl(dir_ / "missing.jsonl", *tok_, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_NE(std::string(e.what()).find("missing.jsonl"), std::string::npos);
  }
}

}  // namespace
}  // namespace spindle::engine
