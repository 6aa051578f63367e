// Prompt datasets: built-ins, JSONL with templates, deterministic splits.

#include "spindle/rl/datasets.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "spindle/core/error.h"
#include "spindle/engine/arith_task.h"
#include "spindle/engine/sampler.h"

namespace spindle::rl {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::vector<size_t> permutation(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  engine::Rng rng(seed);
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);
  return order;
}

Dataset split(std::vector<PromptRow> rows, int64_t heldout_size, uint64_t seed,
              const std::string& what) {
  const size_t n = rows.size();
  const size_t h = heldout_size >= 0 ? size_t(heldout_size) : std::min<size_t>(200, n / 5);
  SPINDLE_CHECK(h < n, invalid_argument,
                "dataset {}: heldout_size {} leaves no training rows of {}", what, h, n);
  const std::vector<size_t> order = permutation(n, engine::sample_seed(seed, 7));
  Dataset d;
  for (size_t i = 0; i < n; ++i) {
    (i < h ? d.heldout : d.train).push_back(std::move(rows[order[i]]));
  }
  return d;
}

std::vector<PromptRow> read_jsonl(const fs::path& file, const std::string& tmpl,
                                  const std::string& reference_field) {
  std::ifstream in(file);
  SPINDLE_CHECK(in.good(), not_found, "dataset file {}: no such file", file.string());
  std::vector<PromptRow> rows;
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", file.string(), no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      SPINDLE_THROW(invalid_argument, "{}: not JSON: {}", where, e.what());
    }
    SPINDLE_CHECK(j.is_object(), invalid_argument, "{}: expected a JSON object", where);
    PromptRow r;
    r.prompt = fill_template(tmpl, line, where);
    if (!reference_field.empty()) {
      SPINDLE_CHECK(j.contains(reference_field), invalid_argument, "{}: no field '{}'", where,
                    reference_field);
      const json& v = j.at(reference_field);
      r.reference = v.is_string() ? v.get<std::string>() : v.dump();
    }
    r.metadata_json = j.dump();
    rows.push_back(std::move(r));
  }
  SPINDLE_CHECK(!rows.empty(), invalid_argument, "dataset file {}: no rows", file.string());
  return rows;
}

}  // namespace

std::string fill_template(const std::string& tmpl, const std::string& row_json,
                          const std::string& where) {
  const json row = json::parse(row_json);
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl[i] != '{') {
      out += tmpl[i++];
      continue;
    }
    const size_t close = tmpl.find('}', i);
    SPINDLE_CHECK(close != std::string::npos, invalid_argument,
                  "{}: prompt_template has an unclosed '{{'", where);
    const std::string key = tmpl.substr(i + 1, close - i - 1);
    SPINDLE_CHECK(row.contains(key), invalid_argument,
                  "{}: prompt_template names field '{}' that the row lacks", where, key);
    const json& v = row.at(key);
    out += v.is_string() ? v.get<std::string>() : v.dump();
    i = close + 1;
  }
  return out;
}

size_t data_index(uint64_t seed, uint64_t i, size_t n) {
  SPINDLE_CHECK(n > 0, invalid_argument, "data_index: empty dataset");
  const uint64_t epoch = i / n;
  // One permutation per epoch; computing it is O(n) per draw but n is small next to a step.
  const std::vector<size_t> order = permutation(n, engine::sample_seed(seed, 1000 + epoch));
  return order[size_t(i % n)];
}

Dataset load_dataset(const DatasetConfig& c, const fs::path& data_root, uint64_t seed) {
  if (c.name == "arith") {
    const engine::ArithTask task;
    Dataset d;
    for (const auto& p : task.train()) d.train.push_back({p.prompt(), p.answer_text(), "{}"});
    for (const auto& p : task.heldout()) d.heldout.push_back({p.prompt(), p.answer_text(), "{}"});
    return d;
  }
  if (c.name == "inline") {
    Dataset d;
    for (const auto& p : c.prompts) d.train.push_back({p, "", "{}"});
    d.heldout = d.train;
    return d;
  }
  fs::path file;
  std::string tmpl = c.prompt_template, ref = c.reference_field;
  if (c.name == "gsm8k") {
    file = data_root / "gsm8k" / "train.jsonl";
    if (tmpl.empty()) tmpl = "Question: {question}\nAnswer:";
    if (ref.empty()) ref = "answer";
  } else if (c.name == "countdown") {
    file = data_root / "countdown" / "countdown_cd3_test.jsonl";
    if (tmpl.empty()) tmpl = "Using the numbers {input}, make {output}. Answer:";
    if (ref.empty()) ref = "output";
  } else if (c.name == "jsonl") {
    file = fs::path(c.path).is_absolute() ? fs::path(c.path) : data_root / c.path;
    SPINDLE_CHECK(!tmpl.empty(), invalid_argument,
                  "dataset jsonl {}: prompt_template is required", file.string());
  } else {
    SPINDLE_THROW(invalid_argument, "dataset.name: unknown dataset '{}'", c.name);
  }
  return split(read_jsonl(file, tmpl, ref), c.heldout_size, seed, c.name);
}

}  // namespace spindle::rl
