// The arithmetic task (spindle/engine/arith_task.h): text format, answer check, and a train /
// held-out split that is deterministic and disjoint by construction.

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "spindle/core/error.h"
#include "spindle/engine/arith_task.h"
#include "spindle/engine/byte_tokenizer.h"

namespace spindle::engine {
namespace {

using Key = std::tuple<int32_t, int32_t, ArithOp>;
Key key(const ArithProblem& p) { return {p.a, p.b, p.op}; }

TEST(ArithTask, TextFormatAndPromptParsing) {
  const ArithProblem p{37, 45, ArithOp::add};
  EXPECT_EQ(p.prompt(), "37+45=");
  EXPECT_EQ(p.answer_text(), "82");
  const ArithProblem s{50, 7, ArithOp::sub};
  EXPECT_EQ(s.prompt(), "50-7=");
  EXPECT_EQ(s.answer(), 43);
  EXPECT_EQ(parse_arith_prompt("37+45="), p);
  EXPECT_EQ(parse_arith_prompt("50-7="), s);
  for (const char* bad : {"", "37+45", "37+45=8", "+4=", "37*4=", "12345+1=", " 1+2=", "1+2= "}) {
    EXPECT_FALSE(parse_arith_prompt(bad).has_value()) << bad;
  }
}

TEST(ArithTask, ExactMatchAnswerCheck) {
  const ArithProblem p{37, 45, ArithOp::add};
  EXPECT_TRUE(arith_correct(p, "82"));
  EXPECT_TRUE(arith_correct(p, " 82\n"));
  for (const char* wrong : {"", " ", "8", "820", "82+1", "83", "082", "-82"}) {
    EXPECT_FALSE(arith_correct(p, wrong)) << wrong;
  }
  EXPECT_EQ(arith_reward(p, "82"), 1.0f);
  EXPECT_EQ(arith_reward(p, "81"), 0.0f);
}

TEST(ArithTask, SplitIsDisjointCompleteAndDeterministic) {
  const ArithTask task;  // a+b and a−b (a >= b) over 0..99
  const size_t n = 100 * 100 + 100 * 101 / 2;
  EXPECT_EQ(task.heldout().size(), 200u);
  EXPECT_EQ(task.train().size(), n - 200u);
  std::set<Key> held, all;
  for (const auto& p : task.heldout()) held.insert(key(p));
  EXPECT_EQ(held.size(), 200u);
  for (const auto& p : task.train()) {
    EXPECT_EQ(held.count(key(p)), 0u) << p.prompt();
    all.insert(key(p));
  }
  all.insert(held.begin(), held.end());
  EXPECT_EQ(all.size(), n);  // every problem exactly once

  const ArithTask again;
  EXPECT_EQ(again.heldout(), task.heldout());
  const ArithTask other({.split_seed = 1});
  EXPECT_NE(other.heldout(), task.heldout());
  EXPECT_EQ(task.max_answer_chars(), 3);

  Rng rng(5);
  std::set<Key> train(all);
  for (const auto& k : held) train.erase(k);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(train.count(key(task.sample_train(rng))), 1u);
}

TEST(ArithTask, SubtractionNeverGoesNegative) {
  const ArithTask task({.max_operand = 9, .heldout_size = 10});
  size_t subs = 0;
  for (const auto* set : {&task.train(), &task.heldout()}) {
    for (const auto& p : *set) {
      EXPECT_GE(p.answer(), 0) << p.prompt();
      subs += p.op == ArithOp::sub;
    }
  }
  EXPECT_EQ(subs, 55u);  // a >= b over 0..9
  EXPECT_EQ(task.train().size() + task.heldout().size(), 155u);
}

TEST(ArithTask, AdditionOnly) {
  const ArithTask task({.max_operand = 9, .with_subtraction = false, .heldout_size = 10});
  EXPECT_EQ(task.train().size() + task.heldout().size(), 100u);
  for (const auto& p : task.train()) EXPECT_EQ(p.op, ArithOp::add);
}

TEST(ArithTask, RejectsBadOptions) {
  EXPECT_THROW(ArithTask({.max_operand = 0}), Error);
  EXPECT_THROW(ArithTask({.max_operand = 9, .heldout_size = 155}), Error);
  EXPECT_THROW(ArithTask({.heldout_size = -1}), Error);
}

TEST(ArithTask, DatumWeighsTheAnswerAndEos) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("spindle_arith_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_byte_tokenizer(dir);
  const auto tok = load_tokenizer(dir / "tokenizer.json");
  std::filesystem::remove_all(dir);
  const TrainDatum d = arith_datum({7, 5, ArithOp::add}, *tok);
  EXPECT_EQ(d.input_tokens, (std::vector<int32_t>{kByteTokenizerBosId, '7', '+', '5', '=', '1', '2'}));
  EXPECT_EQ(d.target_tokens, (std::vector<int32_t>{'7', '+', '5', '=', '1', '2', kByteTokenizerEosId}));
  EXPECT_EQ(d.weights, (std::vector<float>{0, 0, 0, 0, 1, 1, 1}));
}

}  // namespace
}  // namespace spindle::engine
