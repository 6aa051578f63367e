#include "spindle/engine/train_data.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "spindle/core/error.h"
#include "spindle/core/file_io.h"

namespace spindle::engine {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxFileBytes = size_t(1) << 31;

std::string excerpt(const std::string& s) {
  return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

std::vector<int32_t> token_array(const json& row, const char* key, int64_t vocab,
                                 const std::string& where) {
  const json& v = row.at(key);
  SPINDLE_CHECK(v.is_array(), invalid_argument, "{}: \"{}\" must be an array of token ids, got {}",
                where, key, v.type_name());
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& x = v[i];
    SPINDLE_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < vocab,
                  invalid_argument, "{}: \"{}\"[{}] = {} is not a token id in [0, {})", where, key,
                  i, excerpt(x.dump()), vocab);
    ids.push_back(int32_t(x.get<int64_t>()));
  }
  return ids;
}

std::vector<float> weight_array(const json& v, const std::string& where) {
  SPINDLE_CHECK(v.is_array(), invalid_argument, "{}: \"weights\" must be an array of numbers, got {}",
                where, v.type_name());
  std::vector<float> w;
  w.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    SPINDLE_CHECK(v[i].is_number() && std::isfinite(v[i].get<double>()), invalid_argument,
                  "{}: \"weights\"[{}] = {} is not a finite number", where, i, excerpt(v[i].dump()));
    w.push_back(v[i].get<float>());
  }
  return w;
}

TrainDatum token_row(const json& row, int64_t vocab, const std::string& where) {
  SPINDLE_CHECK(row.contains("target_tokens"), invalid_argument,
                "{}: a row with \"input_tokens\" needs \"target_tokens\" too", where);
  TrainDatum d;
  d.input_tokens = token_array(row, "input_tokens", vocab, where);
  d.target_tokens = token_array(row, "target_tokens", vocab, where);
  SPINDLE_CHECK(!d.input_tokens.empty(), invalid_argument, "{}: \"input_tokens\" is empty", where);
  SPINDLE_CHECK(d.target_tokens.size() == d.input_tokens.size(), invalid_argument,
                "{}: {} target_tokens for {} input_tokens (must be equal)", where,
                d.target_tokens.size(), d.input_tokens.size());
  if (const auto it = row.find("weights"); it != row.end() && !it->is_null()) {
    d.weights = weight_array(*it, where);
    SPINDLE_CHECK(d.weights.size() == d.input_tokens.size(), invalid_argument,
                  "{}: {} weights for {} input_tokens (must be equal)", where, d.weights.size(),
                  d.input_tokens.size());
  }
  return d;
}

std::string text_field(const json& row, const char* key, const std::string& where) {
  const auto it = row.find(key);
  SPINDLE_CHECK(it != row.end(), invalid_argument,
                "{}: missing \"{}\" (rows are {{\"prompt\", \"completion\"}} or "
                "{{\"input_tokens\", \"target_tokens\", \"weights\"}})",
                where, key);
  SPINDLE_CHECK(it->is_string(), invalid_argument, "{}: \"{}\" must be a string, got {}", where,
                key, it->type_name());
  return it->get<std::string>();
}

}  // namespace

TrainDatum completion_datum(const Tokenizer& tokenizer, std::string_view prompt,
                            std::string_view completion) {
  SPINDLE_CHECK(!completion.empty(), invalid_argument, "the completion is empty");
  std::vector<int32_t> head = tokenizer.encode(prompt, {.add_special_tokens = true});
  if (head.empty()) {
    SPINDLE_CHECK(tokenizer.bos_id().has_value(), invalid_argument,
                  "the prompt is empty and the tokenizer has no BOS token to start from");
    head.push_back(*tokenizer.bos_id());
  }
  // Encode prompt + completion as one text (what the model sees at sampling time: no second
  // dummy-prefix space, merges across the boundary as the tokenizer makes them). When the
  // prompt's own tokens are a prefix of that, they are the unweighted part; otherwise (a merge
  // straddles the boundary) the two are encoded separately.
  std::vector<int32_t> seq;
  if (!prompt.empty()) {
    std::string joint(prompt);
    joint += completion;
    seq = tokenizer.encode(joint, {.add_special_tokens = true});
    if (seq.size() <= head.size() || !std::equal(head.begin(), head.end(), seq.begin())) seq.clear();
  }
  if (seq.empty()) {
    seq = head;
    const std::vector<int32_t> c = tokenizer.encode(completion, {.add_special_tokens = false});
    SPINDLE_CHECK(!c.empty(), invalid_argument, "the completion encodes to no tokens");
    seq.insert(seq.end(), c.begin(), c.end());
  }
  const size_t n_prompt = head.size();
  if (const auto eos = tokenizer.eos_id()) seq.push_back(*eos);

  TrainDatum d;
  d.input_tokens.assign(seq.begin(), seq.end() - 1);
  d.target_tokens.assign(seq.begin() + 1, seq.end());
  d.weights.resize(d.target_tokens.size());
  for (size_t i = 0; i < d.weights.size(); ++i) d.weights[i] = i + 1 >= n_prompt ? 1.0f : 0.0f;
  return d;
}

TrainDatum parse_sft_row(std::string_view line, const Tokenizer& tokenizer,
                         const SftDataOptions& options, const std::string& where) {
  json row;
  try {
    row = json::parse(line);
  } catch (const json::parse_error& e) {
    SPINDLE_THROW(invalid_argument, "{}: not valid JSON at byte {}: {}", where, e.byte, e.what());
  } catch (const json::exception& e) {  // out_of_range: a number past double's range
    SPINDLE_THROW(invalid_argument, "{}: not valid JSON: {}", where, e.what());
  }
  SPINDLE_CHECK(row.is_object(), invalid_argument, "{}: a row must be a JSON object, got {}",
                where, row.type_name());
  static constexpr const char* kKeys[] = {"prompt", "completion", "input_tokens", "target_tokens",
                                          "weights"};
  for (const auto& [key, value] : row.items()) {
    SPINDLE_CHECK(std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys),
                  invalid_argument,
                  "{}: unknown key \"{}\" (rows are {{\"prompt\", \"completion\"}} or "
                  "{{\"input_tokens\", \"target_tokens\", \"weights\"}})",
                  where, excerpt(key));
  }
  const bool text = row.contains("prompt") || row.contains("completion");
  const bool tokens = row.contains("input_tokens") || row.contains("target_tokens");
  SPINDLE_CHECK(!(text && tokens), invalid_argument,
                "{}: a row is either prompt/completion text or input_tokens/target_tokens, not both",
                where);
  SPINDLE_CHECK(text || tokens, invalid_argument,
                "{}: a row needs \"prompt\" and \"completion\", or \"input_tokens\" and "
                "\"target_tokens\"",
                where);
  const int64_t vocab = options.vocab_size > 0 ? options.vocab_size : tokenizer.vocab_size();

  TrainDatum d;
  if (tokens) {
    SPINDLE_CHECK(row.contains("input_tokens"), invalid_argument,
                  "{}: a row with \"target_tokens\" needs \"input_tokens\" too", where);
    d = token_row(row, vocab, where);
  } else {
    SPINDLE_CHECK(!row.contains("weights"), invalid_argument,
                  "{}: \"weights\" belongs to token rows; text rows weigh the completion", where);
    const std::string prompt = text_field(row, "prompt", where);
    const std::string completion = text_field(row, "completion", where);
    try {
      d = completion_datum(tokenizer, prompt, completion);
    } catch (const Error& e) {
      throw Error(e.code(), where + ": " + e.what());
    }
    for (int32_t t : d.input_tokens) {
      SPINDLE_CHECK(t < vocab, invalid_argument,
                    "{}: the tokenizer produced id {} but the model's vocab is {} (wrong tokenizer?)",
                    where, t, vocab);
    }
  }
  const int64_t n = int64_t(d.input_tokens.size());
  SPINDLE_CHECK(options.max_len <= 0 || n <= options.max_len, invalid_argument,
                "{}: {} tokens do not fit the model's context of {}", where, n, options.max_len);
  SPINDLE_CHECK(d.weights.empty() || std::any_of(d.weights.begin(), d.weights.end(),
                                                  [](float w) { return w != 0.0f; }),
                invalid_argument, "{}: every weight is 0, so the row teaches nothing", where);
  return d;
}

std::vector<TrainDatum> load_sft_jsonl(const std::filesystem::path& path,
                                       const Tokenizer& tokenizer, const SftDataOptions& options) {
  const std::string text = read_file_to_string(path, kMaxFileBytes);
  std::vector<TrainDatum> rows;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    ++line_no;
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    rows.push_back(
        parse_sft_row(line, tokenizer, options, path.string() + ":" + std::to_string(line_no)));
  }
  SPINDLE_CHECK(!rows.empty(), invalid_argument, "{}: no training rows (the file is empty)",
                path.string());
  return rows;
}

}  // namespace spindle::engine
