#pragma once
// Supervised fine-tuning data: JSONL rows -> TrainDatum (next-token targets and loss weights).
//
// One JSON object per line, in either form:
//   text    {"prompt": "...", "completion": "..."}
//           prompt is encoded with the tokenizer's special tokens (BOS), completion without;
//           the two are concatenated and EOS appended when the tokenizer has one. Loss weight
//           is 1 on completion tokens (and EOS), 0 on prompt tokens.
//   tokens  {"input_tokens": [...], "target_tokens": [...], "weights": [...]}
//           Tinker's Datum flattened: equal lengths, weights optional (1 each).
// Blank lines are skipped. Any other key is refused (catches typos such as "completions").
// Every error is spindle::Error naming "file:line" and the field.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/engine/tokenizer.h"
#include "spindle/engine/trainer.h"

namespace spindle::engine {

struct SftDataOptions {
  int64_t max_len = 0;     // the model's context: a row's input tokens must fit (0 = unchecked)
  int64_t vocab_size = 0;  // token ids must be below this (0 = the tokenizer's vocab size)
};

// prompt/completion -> one datum: input = s[0..n−1), target = s[1..n), where s = encode(prompt,
// with specials) ++ encode(completion, without) ++ [EOS if any]. Throws invalid_argument when
// the completion encodes to no tokens, or the prompt does and the tokenizer has no BOS (the
// first completion token would have nothing to be predicted from; an empty prompt otherwise
// becomes [BOS]).
TrainDatum completion_datum(const Tokenizer& tokenizer, std::string_view prompt,
                            std::string_view completion);

// One JSONL row. `where` ("data.jsonl:3") starts every error message. Checks the token ids
// against the vocab, the length against max_len and that some token carries a non-zero weight.
TrainDatum parse_sft_row(std::string_view line, const Tokenizer& tokenizer,
                         const SftDataOptions& options, const std::string& where);

// Every row of a JSONL file, in file order. Throws not_found for a missing file and
// invalid_argument naming the file when it holds no rows.
std::vector<TrainDatum> load_sft_jsonl(const std::filesystem::path& path,
                                       const Tokenizer& tokenizer, const SftDataOptions& options);

}  // namespace spindle::engine
