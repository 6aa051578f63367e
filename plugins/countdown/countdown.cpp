// countdown: 1 if the completion's arithmetic expression uses each given number exactly once
// and evaluates to the target (the Countdown game, rows {"input": "30,100,93", "output": "23"}).
//
// Numbers: metadata "input" ("30,100,93" or an array) or "numbers". Target: metadata "output"
// or "target", else the reference answer.
// Expression: the last match of config.pattern (group 1 if any) when given; otherwise the text
// after the last "Answer:" (case-insensitive) up to the end of that line, else the last
// non-empty line. Around '=' the text is split and the first part that parses and contains an
// operator is used ("100 - 93 + 30 = 37" and "37 = 100 - 93 + 30" both work).
// Grammar: integers, + - * /, parentheses; no unary minus. Arithmetic is exact over int64
// rationals; division by zero or overflow makes the expression invalid.
// Score: 1 correct; config.format_score (default 0) for an expression that parses but is
// wrong (value or numbers); 0 when no expression parses.

#include <spindle/reward_plugin.hpp>

#include <algorithm>
#include <cctype>
#include <numeric>
#include <optional>

#include "plugin_util.h"

namespace {

using spindle::reward_plugins::Config;
using spindle::reward_plugins::json;
using spindle::reward_plugins::Regex;
using spindle::reward_sdk::Item;
using spindle::reward_sdk::ItemError;
using spindle::reward_sdk::Score;

struct Rational {
  int64_t num = 0, den = 1;  // den > 0, reduced
};

struct ParseFailure {};

// Recursive descent: expr := term (('+'|'-') term)*; term := atom (('*'|'/') atom)*;
// atom := integer | '(' expr ')'. Throws ParseFailure on bad syntax or overflow.
class ExprParser {
 public:
  explicit ExprParser(std::string_view s) : s_(s) {}
  Rational parse_all() {
    Rational r = expr();
    skip();
    if (pos_ != s_.size()) throw ParseFailure{};
    return r;
  }
  const std::vector<int64_t>& numbers() const { return numbers_; }
  int operators() const { return ops_; }

 private:
  static Rational make(__int128 n, __int128 d) {
    if (d == 0) throw ParseFailure{};
    if (d < 0) n = -n, d = -d;
    __int128 a = n < 0 ? -n : n, b = d;
    while (b != 0) {
      __int128 t = a % b;
      a = b;
      b = t;
    }
    if (a > 1) n /= a, d /= a;
    if (n > INT64_MAX || n < -INT64_MAX || d > INT64_MAX) throw ParseFailure{};
    return {static_cast<int64_t>(n), static_cast<int64_t>(d)};
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  Rational expr() {
    Rational a = term();
    for (;;) {
      if (eat('+')) {
        Rational b = term();
        a = make(__int128(a.num) * b.den + __int128(b.num) * a.den, __int128(a.den) * b.den);
      } else if (eat('-')) {
        Rational b = term();
        a = make(__int128(a.num) * b.den - __int128(b.num) * a.den, __int128(a.den) * b.den);
      } else {
        return a;
      }
      ++ops_;
    }
  }
  Rational term() {
    Rational a = atom();
    for (;;) {
      if (eat('*')) {
        Rational b = atom();
        a = make(__int128(a.num) * b.num, __int128(a.den) * b.den);
      } else if (eat('/')) {
        Rational b = atom();
        a = make(__int128(a.num) * b.den, __int128(a.den) * b.num);
      } else {
        return a;
      }
      ++ops_;
    }
  }
  Rational atom() {
    if (eat('(')) {
      if (++depth_ > 64) throw ParseFailure{};
      Rational r = expr();
      if (!eat(')')) throw ParseFailure{};
      --depth_;
      return r;
    }
    skip();
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      if (v > (INT64_MAX - 9) / 10) throw ParseFailure{};
      v = v * 10 + (s_[pos_++] - '0');
    }
    if (pos_ == start) throw ParseFailure{};
    numbers_.push_back(v);
    return {v, 1};
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  int ops_ = 0;
  std::vector<int64_t> numbers_;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (std::isspace(static_cast<unsigned char>(s.front())) || s.front() == '`'))
    s.remove_prefix(1);
  while (!s.empty() && (std::isspace(static_cast<unsigned char>(s.back())) || s.back() == '.' ||
                        s.back() == '`'))
    s.remove_suffix(1);
  return s;
}

int64_t to_int(const json& v, const std::string& what) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    std::string s(trim(v.get<std::string>()));
    try {
      size_t used = 0;
      long long x = std::stoll(s, &used);
      if (used == s.size()) return x;
    } catch (const std::exception&) {
    }
  }
  throw ItemError("countdown: " + what + " '" + v.dump() + "' is not an integer");
}

class Countdown {
 public:
  explicit Countdown(const std::string& config_json) {
    Config c("countdown", config_json);
    c.only({"pattern", "format_score"});
    format_score_ = c.num("format_score", 0.0);
    if (c.has("pattern")) custom_.emplace(c.str("pattern", ""), "countdown: config.pattern");
  }

  Score score(const Item& item) {
    const json meta = spindle::reward_plugins::parse_metadata(item.metadata_json);
    std::vector<int64_t> numbers = given_numbers(meta);
    int64_t target = 0;
    if (meta.contains("output")) {
      target = to_int(meta["output"], "metadata.output");
    } else if (meta.contains("target")) {
      target = to_int(meta["target"], "metadata.target");
    } else {
      target = to_int(json(std::string(item.reference)), "reference");
    }

    std::string_view text = extract(item.completion);
    if (text.empty()) return {0.0, "no expression found"};
    std::optional<ExprParser> best;
    Rational value;
    size_t from = 0;
    for (;;) {
      size_t eq = text.find('=', from);
      std::string_view part = text.substr(from, eq == std::string_view::npos ? eq : eq - from);
      try {
        ExprParser p(part);
        Rational v = p.parse_all();
        if (!best || (best->operators() == 0 && p.operators() > 0)) best.emplace(p), value = v;
      } catch (const ParseFailure&) {
      }
      if (eq == std::string_view::npos || (best && best->operators() > 0)) break;
      from = eq + 1;
    }
    if (!best) return {0.0, "no expression parses in '" + std::string(text) + "'"};
    std::vector<int64_t> used = best->numbers();
    std::sort(used.begin(), used.end());
    std::sort(numbers.begin(), numbers.end());
    if (used != numbers) return {format_score_, "numbers used do not match the given numbers"};
    if (value.den != 1 || value.num != target) {
      return {format_score_, "evaluates to " + std::to_string(value.num) +
                                 (value.den != 1 ? "/" + std::to_string(value.den) : "") +
                                 ", target " + std::to_string(target)};
    }
    return {1.0, "correct"};
  }

 private:
  static std::vector<int64_t> given_numbers(const json& meta) {
    const char* key = meta.contains("input") ? "input" : "numbers";
    if (!meta.contains(key)) throw ItemError("countdown: metadata has neither input nor numbers");
    const json& v = meta[key];
    std::vector<int64_t> out;
    if (v.is_array()) {
      for (const json& e : v) out.push_back(to_int(e, std::string("metadata.") + key));
    } else if (v.is_string()) {
      std::string s = v.get<std::string>();
      size_t start = 0;
      for (;;) {
        size_t comma = s.find(',', start);
        out.push_back(to_int(json(s.substr(start, comma - start)), std::string("metadata.") + key));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else {
      throw ItemError(std::string("countdown: metadata.") + key + " must be a string or array");
    }
    return out;
  }

  std::string_view extract(std::string_view completion) const {
    if (custom_) {
      auto m = custom_->last(completion);
      if (!m) return {};
      // Point into a copy owned by this object (valid until the next call).
      last_ = m->text;
      return trim(last_);
    }
    std::string lower(completion);
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (size_t p = lower.rfind("answer:"); p != std::string::npos) {
      std::string_view rest = completion.substr(p + 7);
      return trim(rest.substr(0, rest.find('\n')));
    }
    std::string_view s = trim(completion);
    size_t nl = s.rfind('\n');
    return trim(nl == std::string_view::npos ? s : s.substr(nl + 1));
  }

  double format_score_ = 0.0;
  std::optional<Regex> custom_;
  mutable std::string last_;
};

}  // namespace

namespace {
constexpr const char kConfigSchema[] = R"schema({"type": "object", "additionalProperties": false, "properties": {
  "pattern": {"type": "string", "description": "PCRE2; last match, group 1 if any, is the expression (default: after the last 'Answer:', else the last line)"},
  "format_score": {"type": "number", "description": "score for a parseable but wrong expression (default 0)"}}})schema";
}  // namespace

SPINDLE_REWARD_PLUGIN(Countdown, "countdown",
                      "1 if the expression uses each given number once and hits the target "
                      "(Countdown; exact rational arithmetic)",
                      kConfigSchema, "1.0.0")
