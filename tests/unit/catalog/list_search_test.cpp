// Keyset pagination (with ties), filters, and full-text search.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "catalog_fixture.h"

namespace spindle::catalog {
namespace {

using testing::catch_error;

class ListSearch : public testing::CatalogTest {
 protected:
  // Every page of `q`, concatenated (names), checking each page's size.
  std::vector<std::string> all_pages(ListQuery q, size_t* pages = nullptr) {
    std::vector<std::string> names;
    size_t n = 0;
    while (true) {
      const PolicyPage page = cat_->list("acme", q);
      ++n;
      EXPECT_LE(page.items.size(), size_t(q.limit));
      for (const auto& p : page.items) names.push_back(p.name);
      if (page.next_cursor.empty()) break;
      EXPECT_EQ(page.items.size(), size_t(q.limit));
      q.cursor = page.next_cursor;
    }
    if (pages) *pages = n;
    return names;
  }
};

TEST_F(ListSearch, NameOrderVisitsEveryPolicyExactlyOnce) {
  std::vector<std::string> expected;
  for (int i = 0; i < 103; ++i) {
    const std::string name = fmt::format("p{:03}", (i * 37) % 103);  // created out of order
    cat_->create_policy("acme", spec(name), "t");
    expected.push_back(name);
  }
  std::sort(expected.begin(), expected.end());
  size_t pages = 0;
  EXPECT_EQ(all_pages({.limit = 10}, &pages), expected);
  EXPECT_EQ(pages, 11u);
  EXPECT_EQ(all_pages({.limit = 103}).size(), 103u);
}

TEST_F(ListSearch, UpdatedOrderWithTiesVisitsEveryPolicyExactlyOnce) {
  // Groups of equal updated_ms: the id breaks ties, so no page boundary loses or repeats one.
  std::vector<std::string> created;
  for (int i = 0; i < 60; ++i) {
    if (i % 7 == 0) clock_ms_ += 1;
    const std::string name = fmt::format("q{:02}", i);
    cat_->create_policy("acme", spec(name), "t");
    created.push_back(name);
  }
  const std::vector<std::string> expected(created.rbegin(), created.rend());  // newest first
  for (int limit : {1, 3, 7, 10, 59, 60, 100}) {
    EXPECT_EQ(all_pages({.sort = PolicySort::updated, .limit = limit}), expected) << limit;
  }
  // Touching a policy moves it to the front.
  clock_ms_ += 10;
  cat_->tag("acme", "q05", "hot", "t");
  EXPECT_EQ(cat_->list("acme", {.sort = PolicySort::updated, .limit = 1}).items[0].name, "q05");
}

TEST_F(ListSearch, PagesStayConsistentWhilePoliciesAreAddedAndRemoved) {
  for (int i = 0; i < 40; i += 2) cat_->create_policy("acme", spec(fmt::format("r{:02}", i)), "t");
  ListQuery q{.limit = 5};
  std::vector<std::string> seen;
  PolicyPage page = cat_->list("acme", q);
  for (const auto& p : page.items) seen.push_back(p.name);
  // Between pages: insert before and after the cursor, delete one ahead.
  cat_->create_policy("acme", spec("r01"), "t");
  cat_->create_policy("acme", spec("r31"), "t");
  cat_->remove("acme", "r20", "t");
  while (!page.next_cursor.empty()) {
    q.cursor = page.next_cursor;
    page = cat_->list("acme", q);
    for (const auto& p : page.items) seen.push_back(p.name);
  }
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "r31"), seen.end());  // after the cursor
  EXPECT_EQ(std::find(seen.begin(), seen.end(), "r01"), seen.end());  // before it
  EXPECT_EQ(std::find(seen.begin(), seen.end(), "r20"), seen.end());  // deleted
}

TEST_F(ListSearch, FiltersByBaseTagPrefixAndCreatedRange) {
  cat_->register_base({.id = "big", .arch = "llama", .path = "/m/big", .checksum = "b"}, "t");
  for (int i = 0; i < 30; ++i) {
    auto s = spec(fmt::format("{}-{:02}", i % 3 == 0 ? "math" : "code", i));
    if (i % 2 == 0) s.base_id = "big";
    if (i % 5 == 0) s.tags = {"prod"};
    clock_ms_ = 1000 + i;
    cat_->create_policy("acme", s, "t");
  }
  auto names = [&](ListQuery q) { return all_pages(q); };
  const auto big = names({.base_id = "big", .limit = 4});
  EXPECT_EQ(big.size(), 15u);
  const auto prod = names({.tag = "prod", .limit = 2});
  EXPECT_EQ(prod, (std::vector<std::string>{"code-05", "code-10", "code-20", "code-25", "math-00",
                                            "math-15"}));
  const auto prod_updated = names({.tag = "prod", .sort = PolicySort::updated, .limit = 4});
  EXPECT_EQ(prod_updated, (std::vector<std::string>{"code-25", "code-20", "math-15", "code-10",
                                                    "code-05", "math-00"}));
  const auto math = names({.name_prefix = "math", .limit = 3});
  EXPECT_EQ(math.size(), 10u);
  EXPECT_TRUE(std::all_of(math.begin(), math.end(), [](auto& n) { return n.starts_with("math"); }));
  const auto ranged = names({.created_from_ms = 1010, .created_before_ms = 1020, .limit = 3});
  EXPECT_EQ(ranged.size(), 10u);
  const auto combo = names({.base_id = "big", .tag = "prod", .name_prefix = "code", .limit = 1});
  EXPECT_EQ(combo, (std::vector<std::string>{"code-10", "code-20"}));
  const auto math_updated =
      names({.name_prefix = "math-1", .sort = PolicySort::updated, .limit = 2});
  EXPECT_EQ(math_updated, (std::vector<std::string>{"math-18", "math-15", "math-12"}));
}

TEST_F(ListSearch, MalformedOrForeignCursorsAreRefused) {
  for (int i = 0; i < 3; ++i) cat_->create_policy("acme", spec(fmt::format("c{}", i)), "t");
  const auto page = cat_->list("acme", {.limit = 1});
  ASSERT_FALSE(page.next_cursor.empty());
  EXPECT_EQ(catch_error([&] {
              cat_->list("acme", {.sort = PolicySort::updated, .cursor = page.next_cursor});
            }).code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(catch_error([&] { cat_->list("acme", {.cursor = "garbage"}); }).code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(catch_error([&] { cat_->list("acme", {.limit = 0}); }).code,
            ErrorCode::invalid_argument);
}

TEST_F(ListSearch, FullTextSearchOverNameDescriptionAndTags) {
  cat_->create_policy("acme", spec("gsm8k-grpo", {"math"}, "Reasoning on grade school problems"),
                      "t");
  cat_->create_policy("acme", spec("code-sft", {"code", "prod"}, "Python completion"), "t");
  cat_->create_policy("acme", spec("poetry", {}, "Writes sonnets about mathematics"), "t");
  auto names = [&](std::string_view text) {
    std::vector<std::string> out;
    for (const auto& p : cat_->search("acme", text)) out.push_back(p.name);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(names("gsm8k"), (std::vector<std::string>{"gsm8k-grpo"}));           // name
  EXPECT_EQ(names("sonnets"), (std::vector<std::string>{"poetry"}));             // description
  EXPECT_EQ(names("prod"), (std::vector<std::string>{"code-sft"}));              // tag
  EXPECT_EQ(names("math"), (std::vector<std::string>{"gsm8k-grpo", "poetry"}));  // prefix
  EXPECT_EQ(names("grade problems"), (std::vector<std::string>{"gsm8k-grpo"}));  // all words
  EXPECT_TRUE(names("grade python").empty());
  EXPECT_EQ(names("PYTHON"), (std::vector<std::string>{"code-sft"}));  // case-insensitive
  // FTS syntax in user text is literal, never an error.
  EXPECT_NO_THROW(names("\"unbalanced NEAR( * OR AND -"));
  EXPECT_EQ(catch_error([&] { cat_->search("acme", "  - * "); }).code, ErrorCode::invalid_argument);
  // Triggers keep the index in sync with tags and deletes.
  cat_->tag("acme", "poetry", "verse", "t");
  EXPECT_EQ(names("verse"), (std::vector<std::string>{"poetry"}));
  cat_->untag("acme", "code-sft", "prod", "t");
  EXPECT_TRUE(names("prod").empty());
  cat_->remove("acme", "poetry", "t");
  EXPECT_EQ(names("math"), (std::vector<std::string>{"gsm8k-grpo"}));
}

TEST_F(ListSearch, SearchRanksNameMatchesFirstAndHonoursTheLimit) {
  for (int i = 0; i < 30; ++i) {
    cat_->create_policy("acme", spec(fmt::format("filler-{:02}", i), {}, "mentions zebra once"),
                        "t");
  }
  cat_->create_policy("acme", spec("zebra-tuned", {}, "the zebra policy, all about zebra"), "t");
  // Another tenant's matches neither show up nor change the order.
  cat_->create_policy("other", spec("zebra-zebra"), "t");
  const auto found = cat_->search("acme", "zebra", 5);
  ASSERT_EQ(found.size(), 5u);
  EXPECT_EQ(found[0].name, "zebra-tuned");
  EXPECT_EQ(cat_->search("acme", "zebra", 1000).size(), 31u);
  EXPECT_EQ(catch_error([&] { cat_->search("acme", "zebra", 0); }).code,
            ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace spindle::catalog
