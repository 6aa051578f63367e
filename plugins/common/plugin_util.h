// Shared helpers for the built-in reward plugins (not part of the SDK): config field access
// that throws messages naming the plugin and the field, and a small PCRE2 wrapper.
// Header-only so each plugin stays one self-contained MODULE library.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <nlohmann/json.hpp>
#include <pcre2.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::reward_plugins {

using nlohmann::json;

// Parses a config object; `plugin` prefixes every message.
class Config {
 public:
  Config(const std::string& plugin, const std::string& text) : plugin_(plugin) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail("config is not valid JSON");
    if (!j.is_object()) fail("config must be a JSON object");
    j_ = std::move(j);
  }

  [[noreturn]] void fail(const std::string& msg) const {
    throw std::invalid_argument(plugin_ + ": " + msg);
  }
  [[noreturn]] void fail_field(const std::string& field, const std::string& what) const {
    fail("config." + field + " must be " + what);
  }

  // Refuses fields not in `known` (a typo should not silently mean "default").
  void only(std::initializer_list<const char*> known) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      bool ok = false;
      for (const char* k : known) ok = ok || it.key() == k;
      if (!ok) fail("config." + it.key() + " is not a known field");
    }
  }
  bool has(const char* field) const { return j_.contains(field) && !j_[field].is_null(); }

  std::string str(const char* field, const std::string& def) const {
    if (!has(field)) return def;
    if (!j_[field].is_string()) fail_field(field, "a string");
    return j_[field].get<std::string>();
  }
  double num(const char* field, double def) const {
    if (!has(field)) return def;
    if (!j_[field].is_number()) fail_field(field, "a number");
    return j_[field].get<double>();
  }
  bool boolean(const char* field, bool def) const {
    if (!has(field)) return def;
    if (!j_[field].is_boolean()) fail_field(field, "a boolean");
    return j_[field].get<bool>();
  }
  std::vector<std::string> strings(const char* field) const {
    std::vector<std::string> out;
    if (!has(field)) return out;
    if (!j_[field].is_array()) fail_field(field, "an array of strings");
    for (const json& e : j_[field]) {
      if (!e.is_string()) fail_field(field, "an array of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }

 private:
  std::string plugin_;
  json j_;
};

// A compiled PCRE2 pattern (UTF, invalid UTF never matches).
class Regex {
 public:
  // Throws std::invalid_argument "<what>: <pcre2 message> at offset N".
  Regex(const std::string& pattern, const std::string& what, uint32_t extra_options = 0) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | extra_options, &code,
                                   &offset, nullptr);
    if (re == nullptr) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(code, buf, sizeof(buf));
      throw std::invalid_argument(what + ": " + reinterpret_cast<const char*>(buf) +
                                  " at offset " + std::to_string(offset));
    }
    code_.reset(re);
    uint32_t n = 0;
    pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &n);
    captures_ = n;
  }

  struct Match {
    size_t begin = 0, end = 0;  // whole match
    std::string text;           // group 1 if the pattern has one (and it matched), else whole
  };

  // Every non-overlapping match in `subject` from left to right; `options` are match options
  // (PCRE2_ANCHORED | PCRE2_ENDANCHORED for a full match).
  std::vector<Match> find_all(std::string_view subject, uint32_t options = 0,
                              size_t max_matches = SIZE_MAX) const {
    std::vector<Match> out;
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
    size_t start = 0;
    while (start <= subject.size() && out.size() < max_matches) {
      int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                           subject.size(), start, options, md.get(), nullptr);
      if (rc < 0) break;
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      Match m;
      m.begin = ov[0];
      m.end = ov[1];
      if (captures_ >= 1 && rc >= 2 && ov[2] != PCRE2_UNSET) {
        m.text.assign(subject.substr(ov[2], ov[3] - ov[2]));
      } else {
        m.text.assign(subject.substr(ov[0], ov[1] - ov[0]));
      }
      out.push_back(std::move(m));
      if (options & PCRE2_ANCHORED) break;
      start = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
      // Do not restart inside a UTF-8 sequence.
      while (start < subject.size() && (static_cast<unsigned char>(subject[start]) & 0xC0) == 0x80)
        ++start;
    }
    return out;
  }
  std::optional<Match> last(std::string_view subject) const {
    auto all = find_all(subject);
    if (all.empty()) return std::nullopt;
    return all.back();
  }

 private:
  struct Free {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  std::unique_ptr<pcre2_code, Free> code_;
  uint32_t captures_ = 0;
};

// The dataset row's metadata object ({} if empty or not an object).
inline json parse_metadata(std::string_view text) {
  if (text.empty()) return json::object();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

}  // namespace spindle::reward_plugins
