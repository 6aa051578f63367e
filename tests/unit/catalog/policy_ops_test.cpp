// Create, commit, get by address, read back, fork, rollback, tag, delete, bulk, audit.

#include <gtest/gtest.h>

#include "catalog_fixture.h"
#include "spindle/adapters/revision_format.h"

namespace spindle::catalog {
namespace {

using engine::LoraTarget;
using testing::adapter;
using testing::catch_error;
using testing::same_weights;

class PolicyOps : public testing::CatalogTest {};

size_t blob_files(const std::filesystem::path& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "blobs")) {
    if (e.is_regular_file() && !e.path().filename().string().starts_with('.')) ++n;
  }
  return n;
}

TEST_F(PolicyOps, CreateCommitGetAndReadBack) {
  const Policy p = cat_->create_policy("acme", spec("math", {"rl"}, "GRPO on math"), "alice");
  EXPECT_EQ(p.address(), "spindle://acme/math");
  EXPECT_FALSE(p.head.has_value());
  EXPECT_EQ(p.lora.targets, (std::vector<LoraTarget>{LoraTarget::q, LoraTarget::v}));
  EXPECT_EQ(catch_error([&] { cat_->get("acme", addr("acme", "math")); }).code,
            ErrorCode::not_found);

  const Revision r1 = commit("acme", "math", 1);
  EXPECT_EQ(r1.step, 0);
  EXPECT_FALSE(r1.parent.has_value());
  EXPECT_EQ(r1.id.size(), 64u);
  clock_ms_ += 1000;
  const Revision r2 =
      cat_->commit_revision("acme", "math", adapter(2),
                            {.actor = "alice", .metrics_json = R"({"reward": 0.5, "kl": 0.01})"});
  EXPECT_EQ(r2.parent, r1.id);
  EXPECT_EQ(r2.step, 1);
  EXPECT_EQ(r2.metrics_json, R"({"kl":0.01,"reward":0.5})");  // canonical

  const Resolved head = cat_->get("acme", parse_address("spindle://acme/math@latest"));
  EXPECT_EQ(head.revision.id, r2.id);
  EXPECT_EQ(head.policy.head, r2.id);
  EXPECT_GT(head.policy.updated_ms, p.updated_ms);
  // A unique prefix of 8 hex digits names a revision.
  const Resolved first = cat_->get("acme", addr("acme", "math", r1.id.substr(0, 8)));
  EXPECT_EQ(first.revision.id, r1.id);

  const auto back = cat_->read_revision("acme", addr("acme", "math", r1.id));
  EXPECT_TRUE(same_weights(back.weights, adapter(1)));
  EXPECT_EQ(back.meta.base_model_id, "tiny");
  EXPECT_EQ(back.meta.base_checksum, "c0ffee");
  EXPECT_EQ(uint64_t(r1.bytes), cat_->blobs().size_of(r1.blob).value());

  const auto missing =
      catch_error([&] { cat_->get("acme", addr("acme", "math", "0123456789abcdef")); });
  EXPECT_EQ(missing.code, ErrorCode::not_found);
  EXPECT_EQ(missing.message, "revision 0123456789abcdef not found in spindle://acme/math");
}

TEST_F(PolicyOps, CreateRefusesDuplicatesUnknownBasesAndBadSpecs) {
  cat_->create_policy("acme", spec("p"), "t");
  const auto dup = catch_error([&] { cat_->create_policy("acme", spec("p"), "t"); });
  EXPECT_EQ(dup.code, ErrorCode::already_exists);
  EXPECT_EQ(dup.message, "policy spindle://acme/p already exists");
  auto s = spec("q");
  s.base_id = "nope";
  EXPECT_EQ(catch_error([&] { cat_->create_policy("acme", s, "t"); }).code, ErrorCode::not_found);
  s = spec("q");
  s.lora.rank = 0;
  EXPECT_EQ(catch_error([&] { cat_->create_policy("acme", s, "t"); }).code,
            ErrorCode::invalid_argument);
  s = spec("q", {"bad tag"});
  EXPECT_EQ(catch_error([&] { cat_->create_policy("acme", s, "t"); }).code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(catch_error([&] { cat_->create_policy("bad tenant", spec("q"), "t"); }).code,
            ErrorCode::invalid_argument);
}

TEST_F(PolicyOps, CommitMustFitThePolicySpecAndHonoursExpectedHead) {
  cat_->create_policy("acme", spec("p"), "t");
  EXPECT_NE(catch_error([&] {
              cat_->commit_revision("acme", "p", adapter(1, 8), {});
            }).message.find("rank 8"),
            std::string::npos);
  const LoraTarget k[] = {LoraTarget::k};
  const auto wk = engine::LoraWeights::random(testing::tiny(), 4, 8.0f, k, 1, 0.1f, 0.1f);
  EXPECT_NE(catch_error([&] { cat_->commit_revision("acme", "p", wk, {}); }).message.find("k_proj"),
            std::string::npos);
  const Revision r1 = cat_->commit_revision("acme", "p", adapter(1), {.expected_head = ""});
  EXPECT_EQ(catch_error([&] {
              cat_->commit_revision("acme", "p", adapter(2), {.expected_head = ""});
            }).code,
            ErrorCode::invalid_argument);
  EXPECT_NO_THROW(cat_->commit_revision("acme", "p", adapter(2), {.expected_head = r1.id}));
}

// A session's save names the base its weights were trained on: a policy re-created on another
// base meanwhile refuses the commit, naming both bases.
TEST_F(PolicyOps, CommitHonoursExpectedBase) {
  cat_->create_policy("acme", spec("p"), "t");
  EXPECT_NO_THROW(cat_->commit_revision("acme", "p", adapter(1), {.expected_base_id = "tiny"}));
  const auto e = catch_error(
      [&] { cat_->commit_revision("acme", "p", adapter(2), {.expected_base_id = "other"}); });
  EXPECT_EQ(e.code, ErrorCode::failed_precondition);
  EXPECT_NE(e.message.find("spindle://acme/p is on base 'tiny', not 'other'"), std::string::npos)
      << e.message;
  EXPECT_EQ(cat_->get("acme", parse_address("spindle://acme/p@latest")).revision.step, 0);
}

TEST_F(PolicyOps, IdenticalContentIsStoredOnce) {
  cat_->create_policy("acme", spec("a"), "t");
  cat_->create_policy("acme", spec("b"), "t");
  const Revision ra = commit("acme", "a", 42);
  const Revision rb = commit("acme", "b", 42);
  EXPECT_EQ(ra.blob, rb.blob);
  EXPECT_NE(ra.id, rb.id);  // revision ids also hash the policy
  EXPECT_EQ(blob_files(dir_), 1u);
}

TEST_F(PolicyOps, ForkKeepsLineageAndStartsAtAnyRevision) {
  cat_->create_policy("acme", spec("base-run", {"prod"}), "t");
  const Revision r1 = commit("acme", "base-run", 1);
  const Revision r2 = commit("acme", "base-run", 2);
  const Policy f = cat_->fork("acme", addr("acme", "base-run", r1.id), "explore", "bob");
  EXPECT_EQ(f.head, r1.id);
  EXPECT_EQ(f.forked_from, r1.id);
  EXPECT_TRUE(f.tags.empty());
  EXPECT_EQ(f.lora.rank, 4);
  const Revision f1 = commit("acme", "explore", 3);
  EXPECT_EQ(f1.parent, r1.id);
  EXPECT_EQ(f1.step, 1);
  // The fork reaches its ancestry, not the source's later revisions.
  EXPECT_EQ(cat_->get("acme", addr("acme", "explore", r1.id)).revision.id, r1.id);
  EXPECT_EQ(catch_error([&] { cat_->get("acme", addr("acme", "explore", r2.id)); }).code,
            ErrorCode::not_found);
  const auto taken =
      catch_error([&] { cat_->fork("acme", addr("acme", "base-run"), "explore", "t"); });
  EXPECT_EQ(taken.code, ErrorCode::already_exists);
  EXPECT_EQ(taken.message, "policy spindle://acme/explore already exists");
  cat_->create_policy("acme", spec("empty"), "t");
  EXPECT_EQ(catch_error([&] { cat_->fork("acme", addr("acme", "empty"), "e2", "t"); }).code,
            ErrorCode::not_found);
}

TEST_F(PolicyOps, RollbackMovesTheHeadAndDeletesNothing) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision r1 = commit("acme", "p", 1);
  const Revision r2 = commit("acme", "p", 2);
  const Revision r3 = commit("acme", "p", 3);
  const Policy p = cat_->rollback("acme", addr("acme", "p", r1.id), "carol");
  EXPECT_EQ(p.head, r1.id);
  EXPECT_EQ(cat_->get("acme", addr("acme", "p", r3.id)).revision.id, r3.id);
  const Revision r4 = commit("acme", "p", 4);
  EXPECT_EQ(r4.parent, r1.id);
  // Forward again to a revision off the current line.
  EXPECT_EQ(cat_->rollback("acme", addr("acme", "p", r2.id), "carol").head, r2.id);
  EXPECT_EQ(catch_error([&] { cat_->rollback("acme", addr("acme", "p"), "c"); }).code,
            ErrorCode::invalid_argument);
  const auto log = cat_->audit_log("acme");
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[0].action, "rollback");
  EXPECT_EQ(log[0].actor, "carol");
  EXPECT_NE(log[0].detail_json.find(r2.id), std::string::npos);
}

TEST_F(PolicyOps, TagsAndUntags) {
  cat_->create_policy("acme", spec("p", {"b"}), "t");
  clock_ms_ += 5;
  const Policy p = cat_->tag("acme", "p", "a", "t");
  EXPECT_EQ(p.tags, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.updated_ms, clock_ms_);
  EXPECT_EQ(cat_->tag("acme", "p", "a", "t").tags.size(), 2u);  // idempotent
  EXPECT_EQ(cat_->untag("acme", "p", "b", "t").tags, (std::vector<std::string>{"a"}));
  EXPECT_EQ(catch_error([&] { cat_->untag("acme", "p", "zzz", "t"); }).code, ErrorCode::not_found);
}

TEST_F(PolicyOps, SoftDeleteHidesThePolicyAndFreesTheName) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision r1 = commit("acme", "p", 1);
  cat_->remove("acme", "p", "t");
  EXPECT_EQ(catch_error([&] { cat_->get_policy("acme", "p"); }).message,
            "policy spindle://acme/p not found");
  EXPECT_EQ(catch_error([&] { cat_->get("acme", addr("acme", "p", r1.id)); }).code,
            ErrorCode::not_found);
  EXPECT_TRUE(cat_->list("acme", {}).items.empty());
  EXPECT_NO_THROW(cat_->create_policy("acme", spec("p"), "t"));
  EXPECT_FALSE(cat_->get_policy("acme", "p").head.has_value());
}

TEST_F(PolicyOps, EveryMutationIsAudited) {
  cat_->create_policy("acme", spec("p"), "u1");
  const Revision r1 = commit("acme", "p", 1);
  commit("acme", "p", 2);
  cat_->fork("acme", addr("acme", "p"), "f", "u2");
  cat_->rollback("acme", addr("acme", "p", r1.id), "u3");
  cat_->tag("acme", "p", "x", "u4");
  cat_->untag("acme", "p", "x", "u5");
  cat_->remove("acme", "f", "u6");
  std::vector<std::string> actions;
  for (const auto& e : cat_->audit_log("acme")) actions.insert(actions.begin(), e.action);
  EXPECT_EQ(actions, (std::vector<std::string>{"create_tenant", "create_policy", "commit", "commit",
                                               "fork", "rollback", "tag", "untag", "delete"}));
  const auto page = cat_->audit_log("acme", 2);
  EXPECT_EQ(cat_->audit_log("acme", 100, page.back().id).front().action, "tag");
}

TEST_F(PolicyOps, SurvivesReopenAndSeesOtherConnections) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision r1 = commit("acme", "p", 1);
  auto other = open();
  EXPECT_EQ(other->get("acme", addr("acme", "p")).revision.id, r1.id);
  const Revision r2 = other->commit_revision("acme", "p", adapter(2), {.actor = "o"});
  EXPECT_EQ(cat_->get("acme", addr("acme", "p")).revision.id, r2.id);
  other.reset();
  cat_.reset();
  cat_ = open();
  EXPECT_TRUE(same_weights(cat_->read_revision("acme", addr("acme", "p")).weights, adapter(2)));
  EXPECT_TRUE(cat_->check().ok());
}

TEST_F(PolicyOps, BulkRegisterIsAllOrNothing) {
  const auto w = adapter(9);
  const std::string blob = cat_->blobs().put(adapters::encode_revision(
      w, adapters::revision_meta_for(w, {.base_model_id = "tiny", .base_checksum = "c0ffee"})));
  std::vector<BulkEntry> entries;
  for (int i = 0; i < 5; ++i) entries.push_back({spec(fmt::format("bulk-{}", i), {"bulk"}), blob});
  EXPECT_EQ(cat_->bulk_register("acme", entries, "loader"), 5u);
  EXPECT_EQ(cat_->list("acme", {}).items.size(), 5u);
  EXPECT_TRUE(same_weights(cat_->read_revision("acme", addr("acme", "bulk-3")).weights, w));
  EXPECT_EQ(cat_->search("acme", "bulk").size(), 5u);

  std::vector<BulkEntry> again = {{spec("bulk-new"), blob}, {spec("bulk-0"), blob}};
  const auto bulk_dup = catch_error([&] { cat_->bulk_register("acme", again, "l"); });
  EXPECT_EQ(bulk_dup.code, ErrorCode::already_exists);
  EXPECT_EQ(bulk_dup.message, "bulk_register: policy spindle://acme/bulk-0 already exists");
  EXPECT_EQ(catch_error([&] { cat_->get_policy("acme", "bulk-new"); }).code, ErrorCode::not_found);
  auto wrong = spec("bulk-wrong");
  wrong.lora.rank = 8;
  std::vector<BulkEntry> bad = {{wrong, blob}};
  EXPECT_EQ(catch_error([&] { cat_->bulk_register("acme", bad, "l"); }).code,
            ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace spindle::catalog
