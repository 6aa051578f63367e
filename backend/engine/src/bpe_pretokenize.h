#pragma once
// Hugging Face pre-tokenizers used by byte-level BPE tokenizer.json files: Split, ByteLevel and
// Sequence of those. A pre-tokenizer turns one (normalized) text piece into the pre-tokens that
// the BPE model encodes independently. Semantics follow tokenizers' NormalizedString::split and
// ByteLevel::pre_tokenize; empty pieces are dropped.
//
// Thread-safety: immutable after construction; run() takes per-call scratch.

#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bpe_regex.h"

namespace spindle::engine {

// tokenizers' SplitDelimiterBehavior.
enum class SplitBehavior {
  removed,                // matches dropped, gaps kept
  isolated,               // matches and gaps each their own piece
  merged_with_previous,   // a match is glued to the end of the piece before it
  merged_with_next,       // a match is glued to the start of the piece after it
  contiguous,             // consecutive matches form one piece; gaps their own
};

struct SplitStep {
  std::shared_ptr<const BpeRegex> regex;  // set for {"Regex": ...} patterns
  std::string literal;                    // {"String": ...} patterns (regex == nullptr)
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;  // split on the gaps instead of the matches
};

// ByteLevel: optional " " prefix, optional GPT-2 regex split. The byte -> unicode mapping is
// done by the BPE model afterwards, so ByteLevel must be the last step of the pipeline.
struct ByteLevelStep {
  bool add_prefix_space = false;
  std::shared_ptr<const BpeRegex> gpt2_regex;  // null when use_regex is false
};

using PreTokenizerStep = std::variant<SplitStep, ByteLevelStep>;

// The GPT-2 split pattern ByteLevel uses when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Appends the non-empty pre-tokens of `text` to `out`, in order. Their concatenation equals
  // `text` except for pieces Removed by a Split and prefix spaces added by ByteLevel.
  void run(std::string_view text, RegexScratch& scratch, std::vector<std::string>& out) const;

  const std::vector<PreTokenizerStep>& steps() const { return steps_; }

 private:
  std::vector<PreTokenizerStep> steps_;
};

// Splits `text` by one Split step (exposed for tests).
void apply_split(const SplitStep& step, std::string_view text, RegexScratch& scratch,
                 std::vector<std::string>& out);

}  // namespace spindle::engine
