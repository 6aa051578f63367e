#pragma once
// Reward score distributions for people: shared by `spindle reward score` and (later)
// `spindle reward test`, and the reading of completions from JSONL rows.

#include <span>
#include <string>
#include <vector>

#include "spindle/rewards/rewards.h"

namespace spindle::rewards {

// Population statistics of n values; histogram: `bins` equal-width bins over [min, max]
// (all values in bin 0 when min == max).
struct Distribution {
  size_t n = 0;
  double mean = 0, std = 0, min = 0, max = 0;
  std::vector<size_t> histogram;
};
Distribution describe(std::span<const double> values, size_t bins = 10);

struct RewardReport {
  std::vector<std::string> term_names;  // spec order
  std::vector<double> weights;
  std::vector<Distribution> terms;      // unweighted per-term scores
  Distribution total;                   // Σ weight · score
};
RewardReport summarize(const RewardSpec& spec, const RewardBatch& batch, size_t bins = 10);

// A fixed-width table (one row per term and the total) followed by histogram bars.
std::string format_report(const RewardReport& report);
// {"n", "terms": [{"name", "weight", "mean", "std", "min", "max", "histogram"}], "total": {...}}
std::string report_to_json(const RewardReport& report);

// One JSONL row -> item: "prompt" -> prompt; `completion_field` -> completion (required);
// "completion_tokens" (array of ids) -> tokens; "reference", else "answer" -> reference;
// every other field -> metadata. Throws invalid_argument naming `where` (e.g. "data.jsonl:12").
RewardItem reward_item_from_jsonl(const std::string& line, const std::string& completion_field,
                                  const std::string& where);

}  // namespace spindle::rewards
