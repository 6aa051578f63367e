// Replays a fuzz target's corpus (tests/fuzz/corpus/<target>/, kept in the repo) through its
// LLVMFuzzerTestOneInput with any compiler: what CI runs, so every input libFuzzer ever kept,
// crashes found and fixed included, stays a regression test without Clang.
// Usage: fuzz_<target>_replay DIR|FILE... Exit 0 when every input ran; a bug aborts or
// escapes inside the entry point. An argument that names no input at all is an error, so an
// emptied corpus cannot pass.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
    return 2;
  }
  size_t total = 0;
  for (int a = 1; a < argc; ++a) {
    std::vector<fs::path> inputs;
    std::error_code ec;
    if (fs::is_directory(argv[a], ec)) {
      for (const auto& e : fs::recursive_directory_iterator(argv[a])) {
        if (e.is_regular_file()) inputs.push_back(e.path());
      }
    } else if (fs::is_regular_file(argv[a], ec)) {
      inputs.emplace_back(argv[a]);
    }
    if (inputs.empty()) {
      std::fprintf(stderr, "%s: no corpus inputs in %s\n", argv[0], argv[a]);
      return 1;
    }
    std::sort(inputs.begin(), inputs.end());
    for (const fs::path& p : inputs) {
      std::ifstream in(p, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) {
        std::fprintf(stderr, "%s: cannot read %s\n", argv[0], p.c_str());
        return 1;
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++total;
    }
  }
  std::printf("replayed %zu corpus inputs\n", total);
  return 0;
}
