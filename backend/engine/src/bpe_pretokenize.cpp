#include "bpe_pretokenize.h"

#include <algorithm>

namespace spindle::engine {
namespace {

struct Span {
  size_t begin, end;
  bool is_match;
};

// tokenizers' Pattern::find_matches: matches and the gaps between them, covering all of text.
std::vector<Span> find_spans(const SplitStep& step, std::string_view text, RegexScratch& scratch) {
  std::vector<ByteRange> matches;
  if (step.regex) {
    step.regex->find_all(text, scratch, matches);
  } else if (!step.literal.empty()) {
    for (size_t pos = text.find(step.literal); pos != std::string_view::npos;
         pos = text.find(step.literal, pos + step.literal.size())) {
      matches.emplace_back(pos, pos + step.literal.size());
    }
  }
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), false});
  if (step.invert) {
    for (auto& s : spans) s.is_match = !s.is_match;
  }
  return spans;
}

// Applies the behavior; returns the pieces to keep (tokenizers' NormalizedString::split).
std::vector<Span> apply_behavior(SplitBehavior behavior, const std::vector<Span>& spans) {
  std::vector<Span> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const auto& s : spans) out.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::removed:
      for (const auto& s : spans) {
        if (!s.is_match) out.push_back({s.begin, s.end, false});
      }
      break;
    case SplitBehavior::merged_with_previous:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::contiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
  }
  return out;
}

}  // namespace

void apply_split(const SplitStep& step, std::string_view text, RegexScratch& scratch,
                 std::vector<std::string>& out) {
  for (const auto& s : apply_behavior(step.behavior, find_spans(step, text, scratch))) {
    if (s.end > s.begin) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  }
}

void PreTokenizer::run(std::string_view text, RegexScratch& scratch,
                       std::vector<std::string>& out) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.emplace_back(text);
  std::vector<std::string> next;
  for (const auto& step : steps_) {
    next.clear();
    if (const auto* split = std::get_if<SplitStep>(&step)) {
      for (const auto& p : pieces) apply_split(*split, p, scratch, next);
    } else {
      const auto& byte_level = std::get<ByteLevelStep>(step);
      std::vector<ByteRange> matches;
      for (auto& p : pieces) {
        if (byte_level.add_prefix_space && p.front() != ' ') p.insert(p.begin(), ' ');
        if (!byte_level.gpt2_regex) {
          next.push_back(std::move(p));
          continue;
        }
        // Isolated split: matches and gaps (gaps hold only bytes that are not UTF-8).
        matches.clear();
        byte_level.gpt2_regex->find_all(p, scratch, matches);
        size_t prev = 0;
        for (const auto& [b, e] : matches) {
          if (b > prev) next.push_back(p.substr(prev, b - prev));
          next.push_back(p.substr(b, e - b));
          prev = e;
        }
        if (prev < p.size()) next.push_back(p.substr(prev));
      }
    }
    pieces.swap(next);
  }
  for (auto& p : pieces) out.push_back(std::move(p));
}

}  // namespace spindle::engine
