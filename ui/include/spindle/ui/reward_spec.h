#pragma once
// Reward designer data helpers, no Qt widgets and no network: the reward spec's JSON (exactly
// spec_json of PROTOCOL.md "Reward test": {"terms": [{"name", "plugin", "weight", "config"}]}),
// reward_test rows from a JSONL file, and histogram bin ranges of a DistributionInfo.
//
// Errors: parse functions return an error string ("" = ok) naming the line or field.

#include <QString>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spindle/protocol/messages.h"

namespace spindle::ui {

struct RewardSpecTerm {
  std::string name;
  std::string plugin;
  double weight = 1.0;
  nlohmann::json config = nlohmann::json::object();
  bool operator==(const RewardSpecTerm&) const = default;
};

nlohmann::json specToJson(const std::vector<RewardSpecTerm>& terms);
// Reads {"terms": [...]}; `out` is replaced. weight defaults to 1 and config to {} as on the
// server; a term without name or plugin is an error.
QString specFromJson(const nlohmann::json& spec, std::vector<RewardSpecTerm>& out);

// One reward_test row per non-empty line: "prompt" (or "question") is the prompt, "reference"
// (or "answer") the reference, every other field goes into metadata_json.
QString rowsFromJsonl(const QString& text, std::vector<protocol::RewardTestRow>& out);

// Bin i of `d` covers [lo, hi): bins equal-width bins over [min, max] (PROTOCOL.md); when
// min == max every value is in bin 0, whose range is [min, max].
struct HistogramBin {
  double lo = 0, hi = 0;
  uint64_t count = 0;
};
std::vector<HistogramBin> histogramBins(const protocol::DistributionInfo& d);
QString binLabel(const HistogramBin& bin);  // "0.25–0.5"

}  // namespace spindle::ui
