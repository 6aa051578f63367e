// Deterministic corpus driver for the safetensors header fuzz target: a fixed-seed stream
// of mutations of a few valid files (bit flips, truncations, length-field edits, JSON edits:
// huge and negative numbers, wrong types, deep nesting, duplicated keys) goes through
// LLVMFuzzerTestOneInput. Usage: fuzz_safetensors_corpus [iterations] [seed].
// Exit 0 when every input was either accepted or refused with spindle::Error; anything else
// escapes or aborts inside the entry point.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "spindle/core/error.h"
#include "spindle/engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::string with_length(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(uint64_t(json.size()) >> (8 * i)));
  out += json;
  for (size_t i = 0; i < data_bytes; ++i) out += char(i * 31);
  return out;
}

std::vector<std::string> seeds() {
  return {
      with_length(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 24),
      with_length(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[4],)"
                  R"("data_offsets":[0,8]},"b":{"dtype":"F16","shape":[],"data_offsets":[8,10]},)"
                  R"("c":{"dtype":"I64","shape":[0,9],"data_offsets":[10,10]}}  )",
                  10),
      with_length(R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[4,2],)"
                  R"("data_offsets":[0,32]},"model.norm.weight":{"dtype":"U8","shape":[2],)"
                  R"("data_offsets":[32,34]},"x":{"dtype":"BOOL","shape":[1,1],)"
                  R"("data_offsets":[34,35]}})",
                  40),
  };
}

const char* kTokens[] = {
    "1e400",
    "-1",
    "18446744073709551616",
    "18446744073709551615",
    "9223372036854775808",
    "4294967296",
    "0.5",
    "-0",
    "1E2",
    "null",
    "[]",
    "{}",
    "\"x\"",
    "true",
    "0",
    "1",
    "[0,0]",
    "[1,0]",
    "[-1,-1]",
    "[0,4294967296]",
    "\"F32\"",
    "\"F4\"",
    "\"BF16\"",
    "\"I32\"",
    "{\"dtype\":\"F32\"}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\xc3\x28\"",
};

uint64_t length_field(const std::string& f) {
  uint64_t n = 0;
  for (int i = 7; i >= 0 && f.size() >= 8; --i) n = (n << 8) | uint8_t(f[size_t(i)]);
  return n;
}

// Replaces a random number, string or punctuation token of `json` with a hostile one.
void edit_json(std::string& json, std::mt19937_64& rng) {
  if (json.empty()) return;
  const size_t begin = rng() % json.size();
  size_t end = begin + 1;
  const char c = json[begin];
  if (c == '"') {
    end = json.find('"', begin + 1);
    if (end == std::string::npos) return;
    ++end;
  } else if ((c >= '0' && c <= '9') || c == '-') {
    while (end < json.size() && ((json[end] >= '0' && json[end] <= '9') || json[end] == '-')) ++end;
  }
  json.replace(begin, end - begin, kTokens[rng() % std::size(kTokens)]);
}

std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string f = seed;
  const int rounds = 1 + int(rng() % 3);
  for (int r = 0; r < rounds; ++r) {
    const uint64_t header_len = length_field(f);
    switch (rng() % 7) {
      case 0: {  // bit flips anywhere
        const int flips = 1 + int(rng() % 4);
        for (int i = 0; i < flips && !f.empty(); ++i)
          f[rng() % f.size()] ^= char(1u << (rng() % 8));
        break;
      }
      case 1:  // truncation
        f.resize(f.empty() ? 0 : rng() % f.size());
        break;
      case 2: {  // length-field edits
        const uint64_t choices[] = {0,
                                    1,
                                    header_len - 1,
                                    header_len + 1,
                                    header_len + 8,
                                    uint64_t(100) << 20,
                                    (uint64_t(100) << 20) + 1,
                                    ~uint64_t(0),
                                    uint64_t(f.size()),
                                    rng()};
        const uint64_t n = choices[rng() % std::size(choices)];
        if (f.size() < 8) f.resize(8);
        for (int i = 0; i < 8; ++i) f[size_t(i)] = char(uint8_t(n >> (8 * i)));
        break;
      }
      case 3:
      case 4: {  // JSON edits; the length field follows the edit so the parser reaches it
        if (f.size() < 8) break;
        const size_t n = size_t(std::min<uint64_t>(header_len, f.size() - 8));
        std::string json = f.substr(8, n);
        const std::string tail = f.substr(8 + n);
        edit_json(json, rng);
        f = with_length(json, 0) + tail;
        break;
      }
      case 5: {  // insert or delete a byte
        if (f.empty()) break;
        const size_t at = rng() % f.size();
        if (rng() % 2)
          f.erase(at, 1);
        else
          f.insert(at, 1, "{}[]\",:0-e\\ "[rng() % 12]);
        break;
      }
      case 6: {  // duplicate a slice of the header (often a whole entry)
        if (f.size() < 10) break;
        const size_t a = 8 + rng() % (f.size() - 8);
        const size_t len = 1 + rng() % std::min<size_t>(64, f.size() - a);
        f.insert(8 + rng() % (f.size() - 8), f.substr(a, len));
        break;
      }
    }
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 20000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20240601;
  std::mt19937_64 rng(seed);
  const auto corpus = seeds();
  for (const auto& s : corpus) {  // the seeds themselves must parse
    const auto h = spindle::engine::parse_safetensors_header(
        reinterpret_cast<const uint8_t*>(s.data()), s.size(), s.size(), "seed");
    if (h.entries.empty()) {
      std::fprintf(stderr, "seed parsed to no entries\n");
      return 1;
    }
  }
  long accepted = 0;
  for (long i = 0; i < iterations; ++i) {
    const std::string input = mutate(corpus[size_t(i) % corpus.size()], rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    try {
      spindle::engine::parse_safetensors_header(reinterpret_cast<const uint8_t*>(input.data()),
                                                input.size(), input.size(), "count");
      ++accepted;
    } catch (const spindle::Error&) {
    }
  }
  std::fprintf(stderr, "fuzz_safetensors_corpus: %ld inputs, %ld accepted, %ld refused\n",
               iterations, accepted, iterations - accepted);
  return 0;
}
