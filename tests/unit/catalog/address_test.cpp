// Address parsing: the forms that work, and a clear error for each malformed one.

#include <gtest/gtest.h>

#include "catalog_fixture.h"
#include "spindle/catalog/address.h"

namespace spindle::catalog {
namespace {

using testing::catch_error;

TEST(Address, ParsesFullLatestAndPrefixForms) {
  const Address a = parse_address("spindle://acme/math-grpo@latest");
  EXPECT_EQ(a.tenant, "acme");
  EXPECT_EQ(a.policy, "math-grpo");
  EXPECT_TRUE(a.latest());
  EXPECT_EQ(a.str(), "spindle://acme/math-grpo@latest");
  EXPECT_TRUE(parse_address("spindle://acme/p").latest());
  const std::string id(64, 'a');
  EXPECT_EQ(parse_address("spindle://acme/p@" + id).revision, id);
  EXPECT_EQ(parse_address("spindle://t.1/p_2.v3@0123abcd").revision, "0123abcd");
  EXPECT_EQ(parse_address("spindle://t/p@0123abcd").str(), "spindle://t/p@0123abcd");
  EXPECT_EQ(parse_address("spindle://t/p@0123abcd").policy_str(), "spindle://t/p");
}

TEST(Address, ShortFormUsesTheDefaultTenant) {
  const Address a = parse_address_or_name("my-policy@deadbeef", "local");
  EXPECT_EQ(a.tenant, "local");
  EXPECT_EQ(a.policy, "my-policy");
  EXPECT_EQ(a.revision, "deadbeef");
  EXPECT_EQ(parse_address_or_name("spindle://x/y", "local").tenant, "x");
}

TEST(Address, MalformedAddressesSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"acme/p", "does not start with 'spindle://'"},
      {"spindle:/acme/p", "followed by '//'"},
      {"spindle://acme", "no '/' between tenant and policy"},
      {"spindle:///p", "tenant is empty"},
      {"spindle://acme/", "policy name is empty"},
      {"spindle://acme/@latest", "policy name is empty"},
      {"spindle://ac me/p", "character ' ' at position 2"},
      {"spindle://acme/p/q", "character '/'"},
      {"spindle://acme/-p", "must start with a letter or digit"},
      {"spindle://acme/p@", "nothing after '@'"},
      {"spindle://acme/p@head", "must be 'latest' or 8..64 hex digits"},
      {"spindle://acme/p@abc", "must be 'latest' or 8..64 hex digits"},
      {"spindle://acme/p@ABCDEF012", "only lowercase hex digits"},
      {"spindle://acme/p@0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
       "8..64 hex digits"},
      {"spindle://acme/p@latest@latest", "only lowercase hex digits"},
  };
  for (const auto& [text, why] : cases) {
    const auto err = catch_error([&] { parse_address(text); });
    EXPECT_EQ(err.code, ErrorCode::invalid_argument) << text;
    EXPECT_NE(err.message.find(text), std::string::npos) << err.message;
    EXPECT_NE(err.message.find(why), std::string::npos) << text << " -> " << err.message;
  }
  const std::string long_name(129, 'a');
  EXPECT_NE(
      catch_error([&] { parse_address("spindle://t/" + long_name); }).message.find("at most 128"),
      std::string::npos);
}

TEST(Address, NamesAndTags) {
  EXPECT_NO_THROW(check_name("policy name", "Qwen3-0.6B_lora.v2"));
  EXPECT_THROW(check_name("policy name", ""), Error);
  EXPECT_THROW(check_name("policy name", "a@b"), Error);
  EXPECT_NO_THROW(check_tag("stage:prod"));
  EXPECT_THROW(check_tag("two words"), Error);
  EXPECT_THROW(check_tag(std::string(65, 't')), Error);
}

}  // namespace
}  // namespace spindle::catalog
