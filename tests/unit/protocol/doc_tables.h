#pragma once
// Reading protocol/PROTOCOL.md's tables in tests, so a test can hold the document to the code:
// field names and types against a struct, defaults against the C++ defaults, bounds against
// what validation accepts. Used by protocol_doc_test.cpp and by the service suite
// (tests/integration/service/protocol_doc_test.cpp).

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::testing::doc {

inline std::string protocol_md() {
  std::ifstream in(std::string(SPINDLE_SOURCE_DIR) + "/protocol/PROTOCOL.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return std::string(s);
}

// The text between the first pair of backticks of `cell` ("" when it has none).
inline std::string code(const std::string& cell) {
  const size_t a = cell.find('`');
  if (a == std::string::npos) return "";
  const size_t b = cell.find('`', a + 1);
  return b == std::string::npos ? "" : cell.substr(a + 1, b - a - 1);
}

// The body rows (cells trimmed) of the first Markdown table after the first line containing
// `marker`; empty when there is none. Cells hold no '|'.
inline std::vector<std::vector<std::string>> table_after(const std::string& text,
                                                         const std::string& marker) {
  std::vector<std::vector<std::string>> rows;
  const size_t at = text.find(marker);
  if (at == std::string::npos) return rows;
  std::istringstream in(text.substr(at));
  std::string line;
  bool in_table = false;
  int skipped = 0;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty() || t[0] != '|') {
      if (in_table) break;
      continue;
    }
    in_table = true;
    if (skipped < 2) {  // the header row and the --- row
      ++skipped;
      continue;
    }
    std::vector<std::string> cells;
    size_t start = 1;
    for (size_t i = 1; i < t.size(); ++i) {
      if (t[i] == '|') {
        cells.push_back(trim(std::string_view(t).substr(start, i - start)));
        start = i + 1;
      }
    }
    rows.push_back(std::move(cells));
  }
  return rows;
}

// The leading number of `s` ("1048576 (1 MiB)" -> 1048576).
inline std::optional<double> leading_number(const std::string& s) {
  const char* begin = s.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (end == begin || errno != 0) return std::nullopt;
  return v;
}

struct Probe {
  double value;
  bool accepted;
};

// Values just inside and just outside a bound written as "≥ a", "> a", "[a, b]", "[a, b)",
// "(a, b]" or "(a, b)"; nullopt for any other text ("—", "non-empty", ...). `step`: how far
// outside (1 for integers).
inline std::optional<std::vector<Probe>> bound_probes(const std::string& cell, double step) {
  const std::string s = trim(cell);
  const auto number = [](const std::string& t) -> std::optional<double> {
    const std::string x = trim(t);
    char* end = nullptr;
    const double v = std::strtod(x.c_str(), &end);
    if (x.empty() || *end != '\0') return std::nullopt;
    return v;
  };
  const std::string ge = "\xe2\x89\xa5 ";  // "≥ "
  if (s.rfind(ge, 0) == 0) {
    const auto a = number(s.substr(ge.size()));
    if (!a) return std::nullopt;
    return std::vector<Probe>{{*a, true}, {*a - step, false}};
  }
  if (s.rfind("> ", 0) == 0) {
    const auto a = number(s.substr(2));
    if (!a) return std::nullopt;
    return std::vector<Probe>{{*a, false}, {*a + step, true}};
  }
  if (s.size() < 5 || (s.front() != '[' && s.front() != '(') ||
      (s.back() != ']' && s.back() != ')'))
    return std::nullopt;
  const size_t comma = s.find(',');
  if (comma == std::string::npos) return std::nullopt;
  const auto lo = number(s.substr(1, comma - 1));
  const auto hi = number(s.substr(comma + 1, s.size() - comma - 2));
  if (!lo || !hi) return std::nullopt;
  std::vector<Probe> p;
  if (s.front() == '[') p.insert(p.end(), {{*lo, true}, {*lo - step, false}});
  else p.insert(p.end(), {{*lo, false}, {*lo + step, true}});
  if (s.back() == ']') p.insert(p.end(), {{*hi, true}, {*hi + step, false}});
  else p.insert(p.end(), {{*hi, false}, {*hi - step, true}});
  return p;
}

}  // namespace spindle::testing::doc
