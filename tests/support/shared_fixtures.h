#pragma once
// Locating real third-party fixtures (../shared: models, datasets) from tests.
// One setting: env SPINDLE_SHARED_DIR, else the build's default (the folder beside the source).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace spindle::testing {

inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("SPINDLE_SHARED_DIR"); env && *env) return env;
  return SPINDLE_SHARED_DIR_DEFAULT;
}

// The build folder whose app/ holds spindled and the other binaries: env SPINDLE_BINARY_DIR
// (a GPU bundle unpacked elsewhere sets it), else the build this test came from.
inline std::filesystem::path binary_dir() {
  if (const char* env = std::getenv("SPINDLE_BINARY_DIR"); env && *env) return env;
  return SPINDLE_BINARY_DIR;
}

}  // namespace spindle::testing

// Declares `var` = shared_dir()/rel, or skips the test naming the missing fixture.
#define SPINDLE_SHARED_OR_SKIP(var, rel)                                                   \
  const std::filesystem::path var = ::spindle::testing::shared_dir() / (rel);             \
  if (!std::filesystem::exists(var)) {                                                    \
    GTEST_SKIP() << "fixture missing: " << var.string()                                    \
                 << " (set SPINDLE_SHARED_DIR to the folder holding models/ and data/)";  \
  }
