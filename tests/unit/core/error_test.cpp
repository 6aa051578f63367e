// The one typed error (core/error.h): every code has a distinct name that maps back to it (the
// reward host's wire and the logs carry names), errno maps once for every layer, and the
// macros throw spindle::Error with the code and the formatted message.

#include <gtest/gtest.h>

#include <cerrno>
#include <set>
#include <string>

#include "spindle/core/error.h"

namespace spindle {
namespace {

TEST(ErrorCodes, EveryCodeHasADistinctNameThatMapsBack) {
  std::set<std::string> names;
  for (ErrorCode c : kAllErrorCodes) {
    const std::string name = error_code_name(c);
    EXPECT_NE(name, "unknown");
    EXPECT_TRUE(names.insert(name).second) << name << " named twice";
    ASSERT_TRUE(error_code_from_name(name).has_value()) << name;
    EXPECT_EQ(*error_code_from_name(name), c) << name;
  }
  EXPECT_TRUE(names.contains("failed_precondition"));
  EXPECT_TRUE(names.contains("data_loss"));
  EXPECT_TRUE(names.contains("already_exists"));
  EXPECT_FALSE(error_code_from_name("no_such_code").has_value());
  EXPECT_FALSE(error_code_from_name("").has_value());
}

TEST(ErrorCodes, ErrnoMapsOnceForEveryLayer) {
  EXPECT_EQ(error_code_for_errno(ENOSPC), ErrorCode::resource);
  EXPECT_EQ(error_code_for_errno(EDQUOT), ErrorCode::resource);
  EXPECT_EQ(error_code_for_errno(ENOENT), ErrorCode::not_found);
  EXPECT_EQ(error_code_for_errno(ENOTDIR), ErrorCode::not_found);
  EXPECT_EQ(error_code_for_errno(EIO), ErrorCode::io);
  EXPECT_EQ(error_code_for_errno(EACCES), ErrorCode::io);
}

TEST(ErrorCodes, MacrosThrowTheCodeAndTheFormattedMessage) {
  try {
    SPINDLE_CHECK(1 + 1 == 3, failed_precondition, "run {} is {}", "r1", "running");
    FAIL() << "SPINDLE_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::failed_precondition);
    EXPECT_STREQ(e.what(), "run r1 is running");
  }
  try {
    SPINDLE_ASSERT(sizeof(int) == 0);
    FAIL() << "SPINDLE_ASSERT did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::internal);
    EXPECT_NE(std::string(e.what()).find("error_test.cpp:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spindle
