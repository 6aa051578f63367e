// Tenant isolation: tenant B can neither see, read, fork, search nor trace tenant A's
// policies, by name, by address, by revision id or by search; and every refusal reads exactly
// like a policy that does not exist.

#include <gtest/gtest.h>

#include "catalog_fixture.h"

namespace spindle::catalog {
namespace {

using testing::catch_error;

class TenantIsolation : public testing::CatalogTest {
 protected:
  void SetUp() override {
    CatalogTest::SetUp();
    cat_->create_policy("a", spec("secret", {"classified"}, "quarterly revenue model"), "alice");
    r1_ = commit("a", "secret", 1);
    r2_ = commit("a", "secret", 2);
    cat_->create_policy("b", spec("mine"), "bob");
  }
  Revision r1_, r2_;
};

TEST_F(TenantIsolation, ByNameAndAddressItLooksMissing) {
  const std::string missing_msg = "policy spindle://a/secret not found";
  // What anyone gets for a policy that does not exist:
  EXPECT_EQ(catch_error([&] { cat_->get_policy("a", "nothing"); }).message,
            "policy spindle://a/nothing not found");
  // What B gets for A's existing policy, every way it can ask:
  const std::vector<std::function<void()>> attempts = {
      [&] { cat_->get_policy("b", "secret"); },
      [&] { cat_->get("b", addr("a", "secret")); },
      [&] { cat_->get("b", addr("a", "secret", r1_.id)); },
      [&] { cat_->read_revision("b", addr("a", "secret")); },
      [&] { cat_->lineage("b", addr("a", "secret", r2_.id)); },
      [&] { cat_->fork("b", addr("a", "secret", r1_.id), "stolen", "bob"); },
      [&] { cat_->rollback("b", addr("a", "secret", r1_.id), "bob"); },
      [&] { cat_->tag("b", "secret", "mine", "bob"); },
      [&] { cat_->remove("b", "secret", "bob"); },
  };
  for (size_t i = 0; i < attempts.size(); ++i) {
    const auto err = catch_error(attempts[i]);
    EXPECT_EQ(err.code, ErrorCode::not_found) << i;
    if (i == 0 || i >= 7) {
      EXPECT_EQ(err.message, "policy spindle://b/secret not found") << i;
    } else {
      EXPECT_EQ(err.message, missing_msg) << i;
    }
  }
  // B's own policy of the same name is a different policy.
  cat_->create_policy("b", spec("secret"), "bob");
  EXPECT_FALSE(cat_->get_policy("b", "secret").head.has_value());
  // A's revision ids do not resolve through B's policies.
  EXPECT_EQ(catch_error([&] { cat_->get("b", addr("b", "secret", r1_.id)); }).code,
            ErrorCode::not_found);
  EXPECT_EQ(catch_error([&] { cat_->fork("b", addr("b", "mine", r1_.id), "x", "bob"); }).code,
            ErrorCode::not_found);
  // A is untouched.
  EXPECT_EQ(cat_->get("a", addr("a", "secret")).revision.id, r2_.id);
  EXPECT_TRUE(cat_->get_policy("a", "secret").tags == std::vector<std::string>{"classified"});
}

TEST_F(TenantIsolation, ListSearchAndAuditAreScoped) {
  const auto names = [&](const PolicyPage& p) {
    std::vector<std::string> v;
    for (const auto& x : p.items) v.push_back(x.name);
    return v;
  };
  EXPECT_EQ(names(cat_->list("b", {})), std::vector<std::string>{"mine"});
  EXPECT_EQ(names(cat_->list("b", {.tag = "classified"})), std::vector<std::string>{});
  EXPECT_EQ(names(cat_->list("b", {.name_prefix = "sec"})), std::vector<std::string>{});
  EXPECT_EQ(names(cat_->list("b", {.sort = PolicySort::updated})),
            std::vector<std::string>{"mine"});
  EXPECT_TRUE(cat_->search("b", "secret").empty());
  EXPECT_TRUE(cat_->search("b", "classified").empty());
  EXPECT_TRUE(cat_->search("b", "revenue").empty());
  EXPECT_EQ(cat_->search("a", "revenue").size(), 1u);
  EXPECT_TRUE(cat_->search("nobody", "revenue").empty());
  EXPECT_TRUE(cat_->list("nobody", {}).items.empty());
  for (const auto& e : cat_->audit_log("b")) {
    EXPECT_EQ(e.target.find("spindle://a/"), std::string::npos) << e.target;
  }
  // B's fork of its own policy cannot reach A's lineage either.
  commit("b", "mine", 7);
  const Lineage l = cat_->lineage("b", addr("b", "mine"));
  EXPECT_TRUE(l.ancestors.empty());
  EXPECT_TRUE(l.descendants.empty());
}

}  // namespace
}  // namespace spindle::catalog
