// Lineage both ways, across a fork, with limits.

#include <gtest/gtest.h>

#include "catalog_fixture.h"

namespace spindle::catalog {
namespace {

class LineageTest : public testing::CatalogTest {};

std::vector<std::string> ids(const std::vector<LineageEntry>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.revision.id);
  return out;
}

TEST_F(LineageTest, AncestorsAndDescendantsAcrossAFork) {
  cat_->create_policy("acme", spec("main"), "t");
  std::vector<Revision> r;
  for (int i = 0; i < 5; ++i) r.push_back(commit("acme", "main", uint64_t(i + 1)));
  cat_->fork("acme", addr("acme", "main", r[1].id), "side", "t");
  const Revision s1 = commit("acme", "side", 100);
  const Revision s2 = commit("acme", "side", 101);

  // Ancestors of the fork's head run through the fork point into the source policy.
  const Lineage up = cat_->lineage("acme", addr("acme", "side"));
  EXPECT_EQ(up.revision.id, s2.id);
  EXPECT_EQ(ids(up.ancestors), (std::vector<std::string>{s1.id, r[1].id, r[0].id}));
  EXPECT_EQ(up.ancestors[0].depth, 1);
  EXPECT_EQ(up.ancestors[2].depth, 3);
  EXPECT_EQ(up.ancestors[1].revision.policy, "main");
  EXPECT_FALSE(up.ancestors_truncated);
  EXPECT_TRUE(up.descendants.empty());

  // Descendants of r1 (read through the source policy) include both lines, breadth-first.
  const Lineage down = cat_->lineage("acme", addr("acme", "main", r[1].id));
  ASSERT_EQ(down.descendants.size(), 5u);
  EXPECT_EQ(down.descendants[0].depth, 1);
  EXPECT_EQ(down.descendants[1].depth, 1);
  EXPECT_EQ(down.descendants[2].depth, 2);
  std::vector<std::string> depth1 = {down.descendants[0].revision.id,
                                     down.descendants[1].revision.id};
  std::sort(depth1.begin(), depth1.end());
  std::vector<std::string> want1 = {r[2].id, s1.id};
  std::sort(want1.begin(), want1.end());
  EXPECT_EQ(depth1, want1);
  EXPECT_EQ(down.descendants.back().revision.id, r[4].id);
  EXPECT_EQ(ids(down.ancestors), (std::vector<std::string>{r[0].id}));
}

TEST_F(LineageTest, LimitsTruncateAndSaySo) {
  cat_->create_policy("acme", spec("deep"), "t");
  std::vector<Revision> r;
  for (int i = 0; i < 12; ++i) r.push_back(commit("acme", "deep", uint64_t(i + 1)));
  const Lineage up = cat_->lineage("acme", addr("acme", "deep"), {.max_ancestors = 4});
  EXPECT_EQ(up.ancestors.size(), 4u);
  EXPECT_EQ(up.ancestors.back().revision.id, r[7].id);
  EXPECT_TRUE(up.ancestors_truncated);
  const Lineage full = cat_->lineage("acme", addr("acme", "deep"));
  EXPECT_EQ(full.ancestors.size(), 11u);
  EXPECT_FALSE(full.ancestors_truncated);
  const Lineage down = cat_->lineage("acme", addr("acme", "deep", r[0].id), {.max_descendants = 5});
  EXPECT_EQ(down.descendants.size(), 5u);
  EXPECT_TRUE(down.descendants_truncated);
  EXPECT_EQ(down.descendants.back().depth, 5);
  const Lineage shallow = cat_->lineage("acme", addr("acme", "deep", r[0].id), {.max_depth = 3});
  EXPECT_EQ(shallow.descendants.size(), 3u);
}

}  // namespace
}  // namespace spindle::catalog
