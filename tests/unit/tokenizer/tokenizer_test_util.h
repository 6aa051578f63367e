#pragma once
// Helpers shared by the tokenizer tests: temp files and exception-message matching.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "spindle/core/error.h"

namespace spindle::testing {

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("spindle_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, std::string_view bytes) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace spindle::testing

// Expects `stmt` to throw spindle::Error with `code` and a message containing `needle`.
#define EXPECT_SPINDLE_ERROR(stmt, error_code, needle)                                   \
  do {                                                                                   \
    try {                                                                                \
      stmt;                                                                              \
      ADD_FAILURE() << "expected spindle::Error from " #stmt;                           \
    } catch (const ::spindle::Error& e) {                                                \
      EXPECT_EQ(e.code(), ::spindle::ErrorCode::error_code) << e.what();                 \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)                   \
          << "message '" << e.what() << "' lacks '" << (needle) << "'";                  \
    }                                                                                    \
  } while (0)
