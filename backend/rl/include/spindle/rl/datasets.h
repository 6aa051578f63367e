#pragma once
// Prompt datasets of a GRPO run: named built-ins and JSONL files with a field mapping and a
// prompt template, split into train and held-out sets deterministically by seed.
//
// Built-ins (files under the data root, normally ../shared/data):
//   arith      engine::ArithTask{} (train and its fixed held-out split); prompt "37+45=",
//              reference "82"; needs no files.
//   gsm8k      gsm8k/train.jsonl {question, answer "...#### N"}; template
//              "Question: {question}\nAnswer:", reference = answer (numeric_match reads "####").
//   countdown  countdown/countdown_cd3_test.jsonl {input "30,100,93", output "23"}; template
//              "Using the numbers {input}, make {output}. Answer:", reference = output.
//   jsonl      any file: prompt_template over its fields, reference_field.
//   inline     the config's prompts (no reference); held-out = the same prompts.
// Every row's fields travel to the reward plugins as metadata_json.
// Split (except arith): rows are shuffled with Rng(sample_seed(seed, 7)); the first
// heldout_size (default min(200, n/5)) are held out.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "spindle/rl/config.h"

namespace spindle::rl {

struct PromptRow {
  std::string prompt;     // text given to the tokenizer (with special tokens)
  std::string reference;  // reference answer, "" if none
  std::string metadata_json = "{}";
};

struct Dataset {
  std::vector<PromptRow> train;
  std::vector<PromptRow> heldout;
};

// Throws not_found for a missing file, invalid_argument naming "file:line" and the field for a
// bad row or a template naming a field the row lacks.
Dataset load_dataset(const DatasetConfig& config, const std::filesystem::path& data_root,
                     uint64_t seed);

// "{name}" placeholders replaced by the row's fields (strings as is, others as JSON).
std::string fill_template(const std::string& tmpl, const std::string& row_json,
                          const std::string& where);

// Index into `n` train rows of global draw `i` (step · prompts_per_step + k): a fresh seeded
// permutation per epoch, so the data order is a pure function of (seed, i) and a resumed run
// continues it from the step counter alone.
size_t data_index(uint64_t seed, uint64_t i, size_t n);

}  // namespace spindle::rl
