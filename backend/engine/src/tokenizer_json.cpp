// tokenizer.json (Hugging Face tokenizers' serialization) -> BpeSpec. Validates types and
// rejects, by name, the components this byte-level BPE implementation does not handle.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "tokenizer_bpe.h"

namespace spindle::engine {
namespace {

using json = nlohmann::json;

// Field access that names the file and the JSON path on every error.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  json parse(const std::string& text) const {
    try {
      return json::parse(text);
    } catch (const json::parse_error& e) {
      SPINDLE_THROW(format, "{}: not valid JSON at byte {}: {}", file_, e.byte, e.what());
    } catch (const json::exception& e) {  // out_of_range: a number past double's range
      SPINDLE_THROW(format, "{}: not valid JSON: {}", file_, e.what());
    }
  }
  // Member `key` of object `obj` (at `where`), or nullptr when absent or null.
  const json* member(const json& obj, const char* key, const std::string& where) const {
    SPINDLE_CHECK(obj.is_object(), format, "{}: {} must be an object, got {}", file_, where,
                  obj.type_name());
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& required(const json& obj, const char* key, const std::string& where) const {
    const json* v = member(obj, key, where);
    SPINDLE_CHECK(v != nullptr, format, "{}: {}.{} is missing", file_, where, key);
    return *v;
  }
  std::string string(const json& v, const std::string& where) const {
    SPINDLE_CHECK(v.is_string(), format, "{}: {} must be a string, got {}", file_, where,
                  v.type_name());
    return v.get<std::string>();
  }
  bool flag(const json& obj, const char* key, bool fallback, const std::string& where) const {
    const json* v = member(obj, key, where);
    if (!v) return fallback;
    SPINDLE_CHECK(v->is_boolean(), format, "{}: {}.{} must be a boolean, got {}", file_, where,
                  key, v->type_name());
    return v->get<bool>();
  }
  // Ids are bounded so a hostile file cannot make the id tables huge (cf. ModelConfig).
  static constexpr int64_t kMaxId = int64_t(1) << 22;
  static bool is_id(const json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < kMaxId;
  }
  int32_t id(const json& v, const std::string& where) const {
    SPINDLE_CHECK(is_id(v), format, "{}: {} must be a token id (integer in [0, 2^22)), got {}",
                  file_, where, v.dump());
    return static_cast<int32_t>(v.get<int64_t>());
  }
  std::string type(const json& obj, const std::string& where) const {
    return string(required(obj, "type", where), where + ".type");
  }
  const json& array(const json& v, const std::string& where) const {
    SPINDLE_CHECK(v.is_array(), format, "{}: {} must be an array, got {}", file_, where,
                  v.type_name());
    return v;
  }

 private:
  std::string file_;
};

void parse_model(const Reader& r, const json& model, BpeSpec& spec) {
  const std::string w = "model";
  if (const json* t = r.member(model, "type", w)) {
    const std::string type = r.string(*t, "model.type");
    SPINDLE_CHECK(type == "BPE", unsupported, "{}: model.type '{}' is not supported (only BPE)",
                  r.file(), type);
  }
  SPINDLE_CHECK(!r.flag(model, "byte_fallback", false, w), unsupported,
                "{}: model.byte_fallback = true is not supported (byte-level BPE only)", r.file());
  if (const json* d = r.member(model, "dropout", w)) {
    SPINDLE_CHECK(d->is_number() && d->get<double>() == 0.0, unsupported,
                  "{}: model.dropout {} is not supported (inference needs none)", r.file(),
                  d->dump());
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = r.member(model, key, w)) {
      SPINDLE_CHECK(r.string(*v, w + "." + key).empty(), unsupported,
                    "{}: model.{} '{}' is not supported", r.file(), key, v->get<std::string>());
    }
  }
  if (const json* u = r.member(model, "unk_token", w)) spec.unk_token = r.string(*u, "model.unk_token");
  spec.ignore_merges = r.flag(model, "ignore_merges", false, w);

  const json& vocab = r.required(model, "vocab", w);
  SPINDLE_CHECK(vocab.is_object(), format, "{}: model.vocab must be an object, got {}", r.file(),
                vocab.type_name());
  spec.vocab.reserve(vocab.size());
  for (const auto& [piece, id] : vocab.items()) {
    // The message is only built for a bad entry: vocabs have 10^5 entries.
    const int32_t value = Reader::is_id(id) ? id.get<int32_t>() : r.id(id, "model.vocab['" + piece + "']");
    spec.vocab.emplace(piece, value);
  }

  const json& merges = r.array(r.required(model, "merges", w), "model.merges");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {  // legacy "a b": exactly one space
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      SPINDLE_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, format,
                    "{}: model.merges[{}] '{}' must be two tokens separated by one space",
                    r.file(), i, s);
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      SPINDLE_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), format,
                    "{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"], got {}", r.file(), i,
                    m.dump());
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
}

void parse_added_tokens(const Reader& r, const json& root, BpeSpec& spec) {
  const json* added = r.member(root, "added_tokens", "tokenizer.json");
  if (!added) return;
  r.array(*added, "added_tokens");
  for (size_t i = 0; i < added->size(); ++i) {
    const json& t = (*added)[i];
    const std::string w = fmt::format("added_tokens[{}]", i);
    AddedToken tok;
    tok.id = r.id(r.required(t, "id", w), w + ".id");
    tok.content = r.string(r.required(t, "content", w), w + ".content");
    tok.special = r.flag(t, "special", false, w);
    tok.lstrip = r.flag(t, "lstrip", false, w);
    tok.rstrip = r.flag(t, "rstrip", false, w);
    tok.single_word = r.flag(t, "single_word", false, w);
    tok.normalized = r.flag(t, "normalized", !tok.special, w);
    SPINDLE_CHECK(!tok.content.empty(), format, "{}: {}.content is empty", r.file(), w);
    spec.added_tokens.push_back(std::move(tok));
  }
}

void parse_normalizer(const Reader& r, const json& n, const std::string& w, BpeSpec& spec) {
  const std::string type = r.type(n, w);
  if (type == "NFC") {
    spec.normalize_nfc = true;
  } else if (type == "Sequence") {
    const json& list = r.array(r.required(n, "normalizers", w), w + ".normalizers");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_normalizer(r, list[i], fmt::format("{}.normalizers[{}]", w, i), spec);
    }
  } else {
    SPINDLE_THROW(unsupported, "{}: {}.type '{}' is not supported (NFC or Sequence only)", r.file(),
                  w, type);
  }
}

SplitBehavior parse_behavior(const Reader& r, const json& v, const std::string& w) {
  const std::string b = r.string(v, w);
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  SPINDLE_THROW(format, "{}: {} '{}' is not a split behavior", r.file(), w, b);
}

void parse_pre_tokenizer(const Reader& r, const json& p, const std::string& w,
                         std::vector<PreTokenizerStep>& steps) {
  const std::string type = r.type(p, w);
  if (type == "Sequence") {
    const json& list = r.array(r.required(p, "pretokenizers", w), w + ".pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_pre_tokenizer(r, list[i], fmt::format("{}.pretokenizers[{}]", w, i), steps);
    }
  } else if (type == "Split") {
    SplitStep step;
    const json& pattern = r.required(p, "pattern", w);
    if (const json* re = r.member(pattern, "Regex", w + ".pattern")) {
      step.regex = std::make_shared<BpeRegex>(r.string(*re, w + ".pattern.Regex"),
                                              r.file() + ": " + w + ".pattern.Regex");
    } else if (const json* lit = r.member(pattern, "String", w + ".pattern")) {
      step.literal = r.string(*lit, w + ".pattern.String");
    } else {
      SPINDLE_THROW(format, "{}: {}.pattern must hold \"Regex\" or \"String\", got {}", r.file(), w,
                    pattern.dump());
    }
    step.behavior = parse_behavior(r, r.required(p, "behavior", w), w + ".behavior");
    step.invert = r.flag(p, "invert", false, w);
    steps.emplace_back(std::move(step));
  } else if (type == "ByteLevel") {
    ByteLevelStep step;
    step.add_prefix_space = r.flag(p, "add_prefix_space", true, w);  // tokenizers' defaults
    if (r.flag(p, "use_regex", true, w)) {
      step.gpt2_regex = std::make_shared<BpeRegex>(kGpt2Pattern, r.file() + ": ByteLevel regex");
    }
    steps.emplace_back(std::move(step));
  } else {
    SPINDLE_THROW(unsupported,
                  "{}: {}.type '{}' is not supported (Split, ByteLevel or Sequence only)",
                  r.file(), w, type);
  }
}

void parse_post_processor(const Reader& r, const json& p, const std::string& w, BpeSpec& spec) {
  const std::string type = r.type(p, w);
  if (type == "ByteLevel") return;  // offsets only; ids unchanged
  if (type == "Sequence") {
    const json& list = r.array(r.required(p, "processors", w), w + ".processors");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_post_processor(r, list[i], fmt::format("{}.processors[{}]", w, i), spec);
    }
    return;
  }
  SPINDLE_CHECK(type == "TemplateProcessing", unsupported,
                "{}: {}.type '{}' is not supported (TemplateProcessing, ByteLevel or Sequence only)",
                r.file(), w, type);
  SPINDLE_CHECK(!spec.single_template, unsupported, "{}: {}: only one TemplateProcessing is supported",
                r.file(), w);
  const json* special = r.member(p, "special_tokens", w);
  const json& single = r.array(r.required(p, "single", w), w + ".single");
  std::vector<TemplatePiece> pieces;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string wi = fmt::format("{}.single[{}]", w, i);
    TemplatePiece piece;
    if (const json* seq = r.member(single[i], "Sequence", wi)) {
      const std::string id = r.string(r.required(*seq, "id", wi + ".Sequence"), wi + ".Sequence.id");
      SPINDLE_CHECK(id == "A", format, "{}: {}.Sequence.id must be \"A\" in a single template, got '{}'",
                    r.file(), wi, id);
      piece.is_sequence = true;
    } else if (const json* st = r.member(single[i], "SpecialToken", wi)) {
      const std::string name =
          r.string(r.required(*st, "id", wi + ".SpecialToken"), wi + ".SpecialToken.id");
      const json* entry = special ? r.member(*special, name.c_str(), w + ".special_tokens") : nullptr;
      SPINDLE_CHECK(entry != nullptr, format, "{}: {} names special token '{}' missing from {}.special_tokens",
                    r.file(), wi, name, w);
      const std::string we = w + ".special_tokens['" + name + "']";
      const json& ids = r.array(r.required(*entry, "ids", we), we + ".ids");
      for (size_t k = 0; k < ids.size(); ++k) piece.ids.push_back(r.id(ids[k], fmt::format("{}.ids[{}]", we, k)));
    } else {
      SPINDLE_THROW(format, "{}: {} must hold \"Sequence\" or \"SpecialToken\", got {}", r.file(), wi,
                    single[i].dump());
    }
    pieces.push_back(std::move(piece));
  }
  spec.single_template = std::move(pieces);
}

void parse_decoder(const Reader& r, const json* d) {
  SPINDLE_CHECK(d != nullptr, unsupported, "{}: decoder is null; only ByteLevel is supported",
                r.file());
  const std::string type = r.type(*d, "decoder");
  SPINDLE_CHECK(type == "ByteLevel", unsupported,
                "{}: decoder.type '{}' is not supported (ByteLevel only)", r.file(), type);
}

// bos_token / eos_token from tokenizer_config.json: a string or {"content": ...}.
void parse_tokenizer_config(const std::filesystem::path& path, BpeSpec& spec) {
  const Reader r(path.string());
  const json root = r.parse(read_file_to_string(path));
  const auto token = [&](const char* key) -> std::optional<std::string> {
    const json* v = r.member(root, key, "tokenizer_config.json");
    if (!v) return std::nullopt;
    if (v->is_object()) v = r.member(*v, "content", key);
    return v ? std::optional(r.string(*v, key)) : std::nullopt;
  };
  spec.bos_token = token("bos_token");
  spec.eos_token = token("eos_token");
}

}  // namespace

BpeSpec parse_tokenizer_json_text(const std::string& text, const std::string& source) {
  const Reader r(source);
  const json root = r.parse(text);
  SPINDLE_CHECK(root.is_object(), format, "{}: top level must be an object, got {}", r.file(),
                root.type_name());
  BpeSpec spec;
  spec.source = source;
  parse_model(r, r.required(root, "model", "tokenizer.json"), spec);
  parse_added_tokens(r, root, spec);
  if (const json* n = r.member(root, "normalizer", "tokenizer.json")) {
    parse_normalizer(r, *n, "normalizer", spec);
  }
  std::vector<PreTokenizerStep> steps;
  if (const json* p = r.member(root, "pre_tokenizer", "tokenizer.json")) {
    parse_pre_tokenizer(r, *p, "pre_tokenizer", steps);
  }
  const size_t byte_levels = static_cast<size_t>(std::count_if(steps.begin(), steps.end(), [](const auto& s) {
    return std::holds_alternative<ByteLevelStep>(s);
  }));
  SPINDLE_CHECK(byte_levels == 1 && std::holds_alternative<ByteLevelStep>(steps.back()), unsupported,
                "{}: pre_tokenizer must end with exactly one ByteLevel (byte-level BPE only)",
                r.file());
  spec.pre_tokenizer = PreTokenizer(std::move(steps));
  if (const json* p = r.member(root, "post_processor", "tokenizer.json")) {
    parse_post_processor(r, *p, "post_processor", spec);
  }
  parse_decoder(r, r.member(root, "decoder", "tokenizer.json"));
  return spec;
}

BpeSpec parse_tokenizer_json(const std::filesystem::path& path) {
  BpeSpec spec = parse_tokenizer_json_text(read_file_to_string(path), path.string());
  const auto config = path.parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(config)) parse_tokenizer_config(config, spec);
  return spec;
}

}  // namespace spindle::engine
