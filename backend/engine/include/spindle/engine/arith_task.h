#pragma once
// The arithmetic task of the embedded default base (`spindle make-base --task arithmetic`) and of
// the RL examples built on it: problems, their text format, the train / held-out split and the
// answer check (the reward).
//
// Text format of one example: <|bos|>37+45=82<|eos|> — prompt "37+45=", answer "82". Operands
// are 0..max_operand (1–2 digits by default); subtraction problems (on by default) have a >= b
// so answers are never negative. ArithTask{} is exactly the task `spindle make-base` trains and
// evaluates on.
//
// The split is by construction: every problem of the space is enumerated, shuffled with
// split_seed (Fisher–Yates over Rng, identical on every platform) and the first heldout_size
// go to the held-out set. split_seed is independent of any training seed so every base built
// with the default options is evaluated on the same held-out problems.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/engine/sampler.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/engine/trainer.h"

namespace spindle::engine {

enum class ArithOp : uint8_t { add, sub };

struct ArithProblem {
  int32_t a = 0;
  int32_t b = 0;
  ArithOp op = ArithOp::add;

  int32_t answer() const { return op == ArithOp::add ? a + b : a - b; }
  std::string prompt() const;       // "37+45="
  std::string answer_text() const;  // "82"
  bool operator==(const ArithProblem&) const = default;
};

// Parses a prompt written by ArithProblem::prompt() ("37+45="); nullopt for anything else.
std::optional<ArithProblem> parse_arith_prompt(std::string_view prompt);

// Exact match: the completion, trimmed of ASCII whitespace, is exactly the answer's digits.
// ("82" is right; "820", "82+1", "8" and "" are wrong.)
bool arith_correct(const ArithProblem& problem, std::string_view completion);
// 1 when arith_correct, else 0 (the RL reward).
inline float arith_reward(const ArithProblem& problem, std::string_view completion) {
  return arith_correct(problem, completion) ? 1.0f : 0.0f;
}

struct ArithTaskOptions {
  int32_t max_operand = 99;       // operands in [0, max_operand], max_operand in [1, 9999]
  bool with_subtraction = true;   // a−b (a >= b) problems besides a+b
  int32_t heldout_size = 200;     // must leave at least one training problem
  uint64_t split_seed = 0;
};

class ArithTask {
 public:
  // Throws invalid_argument naming the field when an option is out of range.
  explicit ArithTask(ArithTaskOptions options = {});

  const ArithTaskOptions& options() const { return options_; }
  const std::vector<ArithProblem>& train() const { return train_; }
  const std::vector<ArithProblem>& heldout() const { return heldout_; }
  // A training problem drawn uniformly (with replacement).
  const ArithProblem& sample_train(Rng& rng) const;
  // Characters of the longest answer: generation needs this many tokens plus one for EOS.
  int32_t max_answer_chars() const;

 private:
  ArithTaskOptions options_;
  std::vector<ArithProblem> train_;
  std::vector<ArithProblem> heldout_;
};

// The supervised example of a problem: prompt with BOS, answer, EOS; loss weight 1 on the
// answer tokens and EOS only (operands are random, so predicting them teaches nothing).
TrainDatum arith_datum(const ArithProblem& problem, const Tokenizer& tokenizer);

}  // namespace spindle::engine
