#include "spindle/rewards/summary.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "spindle/core/error.h"

namespace spindle::rewards {

using nlohmann::json;

Distribution describe(std::span<const double> values, size_t bins) {
  Distribution d;
  d.n = values.size();
  d.histogram.assign(std::max<size_t>(bins, 1), 0);
  if (values.empty()) return d;
  d.min = *std::min_element(values.begin(), values.end());
  d.max = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / double(d.n);
  double sq = 0;
  for (double v : values) sq += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(sq / double(d.n));
  const double width = (d.max - d.min) / double(d.histogram.size());
  for (double v : values) {
    size_t b = width > 0 ? static_cast<size_t>((v - d.min) / width) : 0;
    d.histogram[std::min(b, d.histogram.size() - 1)]++;
  }
  return d;
}

RewardReport summarize(const RewardSpec& spec, const RewardBatch& batch, size_t bins) {
  RewardReport r;
  for (size_t t = 0; t < spec.terms.size() && t < batch.per_term.size(); ++t) {
    r.term_names.push_back(spec.terms[t].name);
    r.weights.push_back(spec.terms[t].weight);
    r.terms.push_back(describe(batch.per_term[t], bins));
  }
  r.total = describe(batch.total, bins);
  return r;
}

namespace {

std::string row(const std::string& name, const std::string& weight, const Distribution& d) {
  return fmt::format("{:<20} {:>7} {:>6} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f}\n", name, weight,
                     d.n, d.mean, d.std, d.min, d.max);
}

std::string bars(const std::string& name, const Distribution& d) {
  std::string out = fmt::format("{} histogram [{:.4g}, {:.4g}]:\n", name, d.min, d.max);
  size_t peak = 1;
  for (size_t c : d.histogram) peak = std::max(peak, c);
  const double width = (d.max - d.min) / double(d.histogram.size());
  for (size_t b = 0; b < d.histogram.size(); ++b) {
    if (width == 0 && b > 0) break;
    const size_t len = d.histogram[b] * 40 / peak;
    out += fmt::format("  {:>9.4g} | {:<40} {}\n", d.min + width * double(b), std::string(len, '#'),
                       d.histogram[b]);
  }
  return out;
}

json dist_json(const Distribution& d) {
  return {{"n", d.n},      {"mean", d.mean}, {"std", d.std},
          {"min", d.min},  {"max", d.max},   {"histogram", d.histogram}};
}

}  // namespace

std::string format_report(const RewardReport& r) {
  std::string out = fmt::format("{:<20} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9}\n", "term", "weight",
                                "n", "mean", "std", "min", "max");
  for (size_t t = 0; t < r.terms.size(); ++t) {
    out += row(r.term_names[t], fmt::format("{:.3g}", r.weights[t]), r.terms[t]);
  }
  out += row("total", "", r.total);
  out += "\n";
  for (size_t t = 0; t < r.terms.size(); ++t) out += bars(r.term_names[t], r.terms[t]);
  out += bars("total", r.total);
  return out;
}

std::string report_to_json(const RewardReport& r) {
  json terms = json::array();
  for (size_t t = 0; t < r.terms.size(); ++t) {
    json d = dist_json(r.terms[t]);
    d["name"] = r.term_names[t];
    d["weight"] = r.weights[t];
    terms.push_back(d);
  }
  return json{{"n", r.total.n}, {"terms", terms}, {"total", dist_json(r.total)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

RewardItem reward_item_from_jsonl(const std::string& line, const std::string& completion_field,
                                  const std::string& where) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  SPINDLE_CHECK(!j.is_discarded() && j.is_object(), invalid_argument,
                "{}: not a JSON object", where);
  RewardItem item;
  auto text = [&](const char* field) {
    const json& v = j[field];
    SPINDLE_CHECK(v.is_string() || v.is_number(), invalid_argument,
                  "{}: field '{}' must be a string, got {}", where, field, v.type_name());
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  SPINDLE_CHECK(j.contains(completion_field), invalid_argument,
                "{}: no field '{}' (the completion; see --completion-field)", where,
                completion_field);
  item.completion = text(completion_field.c_str());
  if (j.contains("prompt")) item.prompt = text("prompt");
  const char* ref_field = j.contains("reference") ? "reference" : "answer";
  if (j.contains(ref_field)) item.reference = text(ref_field);
  if (j.contains("completion_tokens")) {
    SPINDLE_CHECK(j["completion_tokens"].is_array(), invalid_argument,
                  "{}: completion_tokens must be an array of ids", where);
    for (const json& id : j["completion_tokens"]) {
      SPINDLE_CHECK(id.is_number_integer(), invalid_argument,
                    "{}: completion_tokens must be an array of ids", where);
      item.completion_tokens.push_back(id.get<int32_t>());
    }
  }
  json meta = json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == completion_field || k == "prompt" || k == ref_field || k == "completion_tokens")
      continue;
    meta[k] = it.value();
  }
  item.metadata_json = meta.dump(-1, ' ', false, json::error_handler_t::replace);
  return item;
}

}  // namespace spindle::rewards
