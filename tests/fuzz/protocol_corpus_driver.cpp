// Deterministic corpus driver for the protocol decode fuzz target: a fixed-seed stream of
// mutations of valid requests and replies of every op in both encodings (bit flips,
// truncations, byte and token insertions, JSON token edits, length-field edits, frame splits,
// merges, drops and duplicates) goes through LLVMFuzzerTestOneInput.
// Usage: fuzz_protocol_corpus [iterations] [seed], or fuzz_protocol_corpus --seeds DIR to write
// the unmutated inputs as a libFuzzer seed corpus. Exit 0 when every input was accepted or
// refused with ProtocolError; anything else escapes or traps inside the entry point.

#include <cstdio>
#include <cstring>
#include <fstream>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "message_samples.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using namespace spindle::protocol;

const std::string kSeparator("\xff\xfe\xfd\xfc", 4);

const char* kTokens[] = {"1e400", "-1", "18446744073709551616", "4294967296", "NaN", "-Infinity",
                         "null", "[]", "{}", "\"x\"", "true", "0.5", "\"\\u0000\"", "\"\\ud800\"",
                         "\"\xc3\x28\"", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
                         "\"cereal_class_version\"", "\"body\"", "\"frame\": 99", "\"shape\": [-1]",
                         "\"dtype\": \"int64\""};

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += kSeparator;
    out += parts[i];
  }
  return out;
}

void mutate(std::vector<std::string>& parts, std::mt19937_64& rng) {
  std::string& h = parts[0];
  const auto pick = [&](size_t n) { return n ? size_t(rng() % n) : size_t(0); };
  switch (rng() % 9) {
    case 0: {  // bit flips in the header
      for (int i = 0, n = 1 + int(rng() % 4); i < n && !h.empty(); ++i)
        h[pick(h.size())] ^= char(1u << (rng() % 8));
      break;
    }
    case 1: h.resize(pick(h.size() + 1)); break;  // truncation
    case 2: {  // insert or delete bytes
      const size_t at = pick(h.size() + 1);
      if (rng() % 2 && at < h.size())
        h.erase(at, 1 + pick(8));
      else
        h.insert(at, std::string(1 + pick(4), char(rng())));
      break;
    }
    case 3: {  // a hostile token at a random position (JSON or binary)
      h.insert(pick(h.size() + 1), kTokens[pick(std::size(kTokens))]);
      break;
    }
    case 4: {  // overwrite 8 bytes with a length-like value (binary counts)
      if (h.size() < 10) break;
      const uint64_t values[] = {0, 1, 255, 1ull << 32, ~0ull, 1ull << 62, uint64_t(h.size())};
      const uint64_t v = values[pick(std::size(values))];
      const size_t at = 1 + pick(h.size() - 9);
      for (int i = 0; i < 8; ++i) h[at + size_t(i)] = char(v >> (8 * i));
      break;
    }
    case 5: {  // split a frame in two
      if (parts.size() < 2) break;
      const size_t i = 1 + pick(parts.size() - 1);
      const size_t at = pick(parts[i].size() + 1);
      const std::string tail = parts[i].substr(at);
      parts[i].resize(at);
      parts.insert(parts.begin() + long(i) + 1, tail);
      break;
    }
    case 6: {  // merge or drop frames
      if (parts.size() < 2) break;
      const size_t i = 1 + pick(parts.size() - 1);
      if (rng() % 2 && i + 1 < parts.size()) parts[i] += parts[i + 1];
      parts.erase(parts.begin() + long(rng() % 2 ? i : std::min(i + 1, parts.size() - 1)));
      break;
    }
    case 7: {  // duplicate or add frames
      const size_t i = pick(parts.size());
      parts.push_back(i ? parts[i] : std::string(pick(64), '\x01'));
      break;
    }
    case 8: {  // swap the encoding byte
      if (!h.empty()) h[0] = "BJX\0"[pick(4)];
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 20000;  // "--seeds" parses as 0
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20240607;
  std::vector<std::vector<std::string>> seeds;
  for (Op op : testing::all_ops())
    for (Encoding enc : {Encoding::binary, Encoding::json}) {
      seeds.push_back(testing::encode_parts(testing::sample_request(op, enc)));
      seeds.push_back(testing::encode_parts(testing::sample_reply(op, enc)));
    }
  if (argc > 2 && std::strcmp(argv[1], "--seeds") == 0) {
    for (size_t i = 0; i < seeds.size(); ++i)
      std::ofstream(std::string(argv[2]) + "/seed" + std::to_string(i), std::ios::binary)
          << join(seeds[i]);
    return 0;
  }
  std::mt19937_64 rng(seed);
  long failures = 0;
  const auto run = [&](const std::vector<std::string>& parts, long i) {
    const std::string input = join(parts);
    try {
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    } catch (const std::exception& e) {
      if (++failures <= 10) std::fprintf(stderr, "case %ld: %s\n", i, e.what());
    }
  };
  for (size_t i = 0; i < seeds.size(); ++i) run(seeds[i], -long(i) - 1);
  for (long i = 0; i < iterations; ++i) {
    std::vector<std::string> parts = seeds[rng() % seeds.size()];
    for (int r = 0, n = 1 + int(rng() % 3); r < n; ++r) mutate(parts, rng);
    run(parts, i);
  }
  std::printf("%ld cases, %ld failures\n", iterations + long(seeds.size()), failures);
  return failures ? 1 : 0;
}
