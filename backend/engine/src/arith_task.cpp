#include "spindle/engine/arith_task.h"

#include <charconv>

#include "spindle/core/error.h"
#include "spindle/engine/train_data.h"

namespace spindle::engine {
namespace {

char op_char(ArithOp op) { return op == ArithOp::add ? '+' : '-'; }

// Unsigned decimal of 1–4 digits at the front of s; advances s past it.
std::optional<int32_t> take_number(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && n < 5 && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || n > 4) return std::nullopt;
  int32_t v = 0;
  std::from_chars(s.data(), s.data() + n, v);
  s.remove_prefix(n);
  return v;
}

uint64_t below(Rng& rng, uint64_t n) { return rng.next() % n; }  // bias < n/2^64: negligible

}  // namespace

std::string ArithProblem::prompt() const {
  return std::to_string(a) + op_char(op) + std::to_string(b) + "=";
}

std::string ArithProblem::answer_text() const { return std::to_string(answer()); }

std::optional<ArithProblem> parse_arith_prompt(std::string_view s) {
  ArithProblem p;
  const auto a = take_number(s);
  if (!a || s.empty() || (s.front() != '+' && s.front() != '-')) return std::nullopt;
  p.op = s.front() == '+' ? ArithOp::add : ArithOp::sub;
  s.remove_prefix(1);
  const auto b = take_number(s);
  if (!b || s != "=") return std::nullopt;
  p.a = *a;
  p.b = *b;
  return p;
}

bool arith_correct(const ArithProblem& problem, std::string_view completion) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t first = completion.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return false;
  completion = completion.substr(first, completion.find_last_not_of(kSpace) - first + 1);
  return completion == problem.answer_text();
}

ArithTask::ArithTask(ArithTaskOptions options) : options_(options) {
  SPINDLE_CHECK(options.max_operand >= 1 && options.max_operand <= 9999, invalid_argument,
                "arithmetic task: max_operand must be in [1, 9999], got {}", options.max_operand);
  std::vector<ArithProblem> all;
  for (int32_t a = 0; a <= options.max_operand; ++a) {
    for (int32_t b = 0; b <= options.max_operand; ++b) {
      all.push_back({a, b, ArithOp::add});
      if (options.with_subtraction && a >= b) all.push_back({a, b, ArithOp::sub});
    }
  }
  SPINDLE_CHECK(options.heldout_size >= 0 && size_t(options.heldout_size) < all.size(),
                invalid_argument,
                "arithmetic task: heldout_size must be in [0, {}) for {} problems, got {}",
                all.size(), all.size(), options.heldout_size);
  Rng rng(options.split_seed);
  for (size_t i = all.size() - 1; i > 0; --i) std::swap(all[i], all[below(rng, i + 1)]);
  heldout_.assign(all.begin(), all.begin() + options.heldout_size);
  train_.assign(all.begin() + options.heldout_size, all.end());
}

const ArithProblem& ArithTask::sample_train(Rng& rng) const {
  return train_[below(rng, train_.size())];
}

int32_t ArithTask::max_answer_chars() const {
  return int32_t(std::to_string(2 * options_.max_operand).size());
}

TrainDatum arith_datum(const ArithProblem& problem, const Tokenizer& tokenizer) {
  return completion_datum(tokenizer, problem.prompt(), problem.answer_text());
}

}  // namespace spindle::engine
