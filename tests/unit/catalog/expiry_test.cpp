// Ephemeral revisions (CommitOptions::expires_ms, Tinker's ttl_seconds): servable until
// collect_expired collects them past expiry, then not_found "expired" while the row stays for
// lineage; blobs a live revision shares are kept; promote makes one durable; a later commit
// of the same bytes re-writes a collected blob; gc() works over expired revisions. Time is
// the fixture's fake clock.

#include <gtest/gtest.h>

#include <algorithm>

#include "catalog_fixture.h"
#include "spindle/engine/optimizer.h"

namespace spindle::catalog::testing {
namespace {

constexpr int64_t kTtlMs = 60'000;

class ExpiryTest : public CatalogTest {
 protected:
  // An ephemeral commit expiring kTtlMs after it.
  Revision commit_ephemeral(const std::string& tenant, const std::string& policy, uint64_t seed,
                            int64_t ttl_ms = kTtlMs) {
    clock_ms_ += 1000;
    return cat_->commit_revision(tenant, policy, adapter(seed),
                                 {.actor = "test", .expires_ms = clock_ms_ + ttl_ms});
  }
  bool blob_on_disk(const std::string& blob) {
    return std::filesystem::exists(cat_->blobs().path_of(blob));
  }
  int count_audit(const std::string& tenant, const std::string& action) {
    int n = 0;
    for (const auto& e : cat_->audit_log(tenant, 1000)) n += e.action == action;
    return n;
  }
};

TEST_F(ExpiryTest, EphemeralIsServableUntilCollectedThenExpiredButInLineage) {
  cat_->create_policy("acme", spec("rl"), "t");
  const Revision durable = commit("acme", "rl", 1);
  const Revision eph = commit_ephemeral("acme", "rl", 2);
  EXPECT_EQ(eph.expires_ms, clock_ms_ + kTtlMs);
  EXPECT_FALSE(eph.expired);
  EXPECT_EQ(durable.expires_ms, 0);

  // Servable and addressable like any revision.
  const Resolved head = cat_->get("acme", addr("acme", "rl"));
  EXPECT_EQ(head.revision.id, eph.id);
  EXPECT_EQ(head.revision.expires_ms, eph.expires_ms);
  EXPECT_TRUE(
      same_weights(cat_->read_revision("acme", addr("acme", "rl", eph.id)).weights, adapter(2)));

  // Not due yet: nothing collected, even just before expiry.
  clock_ms_ = eph.expires_ms - 1;
  EXPECT_TRUE(cat_->collect_expired("op").expired.empty());
  EXPECT_TRUE(blob_on_disk(eph.blob));

  clock_ms_ = eph.expires_ms;  // expires_ms <= now: due
  const ExpiryReport report = cat_->collect_expired("op");
  ASSERT_EQ(report.expired.size(), 1u);
  EXPECT_EQ(report.expired[0].tenant, "acme");
  EXPECT_EQ(report.expired[0].policy, "rl");
  EXPECT_EQ(report.expired[0].revision_id, eph.id);
  EXPECT_EQ(report.expired[0].blob, eph.blob);
  EXPECT_EQ(report.blobs_deleted, 1);
  EXPECT_EQ(report.bytes_freed, eph.bytes);
  EXPECT_FALSE(blob_on_disk(eph.blob));
  EXPECT_TRUE(blob_on_disk(durable.blob));
  EXPECT_EQ(count_audit("acme", "expire"), 1);

  // Addressing it: not_found naming the expiry, by id and as the head.
  for (const Address& a : {addr("acme", "rl", eph.id), addr("acme", "rl")}) {
    const Caught get = catch_error([&] { cat_->get("acme", a); });
    EXPECT_EQ(get.code, ErrorCode::not_found) << a.str();
    EXPECT_NE(get.message.find("expired at"), std::string::npos) << get.message;
    EXPECT_NE(get.message.find(eph.id), std::string::npos) << get.message;
    EXPECT_NE(get.message.find("UTC"), std::string::npos) << get.message;
    EXPECT_NE(get.message.find("promote"), std::string::npos) << get.message;
    EXPECT_EQ(catch_error([&] { cat_->read_revision("acme", a); }).code, ErrorCode::not_found);
    EXPECT_EQ(catch_error([&] { cat_->read_optimizer_state("acme", a); }).code,
              ErrorCode::not_found);
  }
  // Neither a fork nor a rollback may make it a head again.
  EXPECT_EQ(catch_error([&] { cat_->fork("acme", addr("acme", "rl"), "f", "t"); }).code,
            ErrorCode::not_found);
  // The older durable revision is still served.
  EXPECT_TRUE(same_weights(cat_->read_revision("acme", addr("acme", "rl", durable.id)).weights,
                           adapter(1)));

  // The row stays: the policy still names it as head, lineage lists it as expired.
  EXPECT_EQ(cat_->get_policy("acme", "rl").head, eph.id);
  const Lineage from_durable = cat_->lineage("acme", addr("acme", "rl", durable.id));
  ASSERT_EQ(from_durable.descendants.size(), 1u);
  EXPECT_EQ(from_durable.descendants[0].revision.id, eph.id);
  EXPECT_TRUE(from_durable.descendants[0].revision.expired);
  EXPECT_EQ(from_durable.descendants[0].revision.expires_ms, eph.expires_ms);
  EXPECT_FALSE(from_durable.revision.expired);
  const Lineage of_expired = cat_->lineage("acme", addr("acme", "rl"));
  EXPECT_EQ(of_expired.revision.id, eph.id);
  EXPECT_TRUE(of_expired.revision.expired);
  ASSERT_EQ(of_expired.ancestors.size(), 1u);
  EXPECT_EQ(of_expired.ancestors[0].revision.id, durable.id);
  EXPECT_EQ(cat_->list("acme", {}).items.size(), 1u);

  // Rolling back to the durable one serves again; a second collection finds nothing.
  cat_->rollback("acme", addr("acme", "rl", durable.id), "t");
  EXPECT_EQ(cat_->get("acme", addr("acme", "rl")).revision.id, durable.id);
  EXPECT_EQ(catch_error([&] { cat_->rollback("acme", addr("acme", "rl", eph.id), "t"); }).code,
            ErrorCode::not_found);
  const ExpiryReport again = cat_->collect_expired("op");
  EXPECT_TRUE(again.expired.empty());
  EXPECT_EQ(again.blobs_deleted, 0);
  EXPECT_TRUE(cat_->check().ok());  // an expired revision's missing blob is no fault
}

TEST_F(ExpiryTest, HeadExpiredOlderDurableStillAddressableAndCommitsContinue) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision d = commit("acme", "p", 1);
  const Revision e1 = commit_ephemeral("acme", "p", 2);
  clock_ms_ += kTtlMs;
  ASSERT_EQ(cat_->collect_expired("op").expired.size(), 1u);
  const Caught latest = catch_error([&] { cat_->get("acme", addr("acme", "p")); });
  EXPECT_EQ(latest.code, ErrorCode::not_found);
  EXPECT_NE(latest.message.find("head"), std::string::npos) << latest.message;
  EXPECT_NE(latest.message.find("expired"), std::string::npos) << latest.message;
  EXPECT_EQ(cat_->get("acme", addr("acme", "p", d.id.substr(0, 10))).revision.id, d.id);

  // Training goes on: the next commit's parent is the expired revision (lineage kept).
  const Revision next = commit("acme", "p", 3);
  EXPECT_EQ(next.parent, e1.id);
  EXPECT_EQ(cat_->get("acme", addr("acme", "p")).revision.id, next.id);
}

TEST_F(ExpiryTest, BlobSharedWithALiveRevisionIsKept) {
  cat_->create_policy("acme", spec("a"), "t");
  cat_->create_policy("acme", spec("b"), "t");
  cat_->create_policy("acme", spec("c"), "t");
  const Revision eph = commit_ephemeral("acme", "a", 7);
  const Revision dur = commit("acme", "b", 7);  // same weights: the same blob
  const Revision later = commit_ephemeral("acme", "c", 8, 10 * kTtlMs);
  const Revision shares_later = commit_ephemeral("acme", "a", 8);  // shares c's blob
  ASSERT_EQ(eph.blob, dur.blob);
  ASSERT_EQ(later.blob, shares_later.blob);

  clock_ms_ += 2 * kTtlMs;  // eph and shares_later are due; later is not
  const ExpiryReport r = cat_->collect_expired("op");
  EXPECT_EQ(r.expired.size(), 2u);
  EXPECT_EQ(r.blobs_deleted, 0);  // one shared with a durable, one with an unexpired revision
  EXPECT_EQ(r.bytes_freed, 0);
  EXPECT_TRUE(blob_on_disk(eph.blob));
  EXPECT_TRUE(blob_on_disk(later.blob));
  EXPECT_EQ(catch_error([&] { cat_->get("acme", addr("acme", "a", eph.id)); }).code,
            ErrorCode::not_found);  // expired even though its blob is still there
  EXPECT_TRUE(same_weights(cat_->read_revision("acme", addr("acme", "b")).weights, adapter(7)));

  clock_ms_ += 10 * kTtlMs;  // now `later` too: its blob has no live revision left
  const ExpiryReport r2 = cat_->collect_expired("op");
  ASSERT_EQ(r2.expired.size(), 1u);
  EXPECT_EQ(r2.expired[0].revision_id, later.id);
  EXPECT_EQ(r2.blobs_deleted, 1);
  EXPECT_FALSE(blob_on_disk(later.blob));
  EXPECT_TRUE(blob_on_disk(dur.blob));
  EXPECT_TRUE(cat_->check().ok());
}

TEST_F(ExpiryTest, PromoteKeepsItAfterExpiryIsIdempotentAndRefusedOnceCollected) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision d = commit("acme", "p", 1);
  const Revision keep = commit_ephemeral("acme", "p", 2);
  const Revision lose = commit_ephemeral("acme", "p", 3);

  // Promote by id: durable from now on; audited once.
  const Revision promoted = cat_->promote_revision("acme", addr("acme", "p", keep.id), "u");
  EXPECT_EQ(promoted.id, keep.id);
  EXPECT_EQ(promoted.expires_ms, 0);
  EXPECT_FALSE(promoted.expired);
  EXPECT_EQ(cat_->get("acme", addr("acme", "p", keep.id)).revision.expires_ms, 0);
  EXPECT_EQ(count_audit("acme", "promote"), 1);
  // Promoting a durable revision (this one now, or one that always was) changes nothing.
  EXPECT_EQ(cat_->promote_revision("acme", addr("acme", "p", keep.id), "u").expires_ms, 0);
  EXPECT_EQ(cat_->promote_revision("acme", addr("acme", "p", d.id), "u").expires_ms, 0);
  EXPECT_EQ(count_audit("acme", "promote"), 1);

  clock_ms_ += 2 * kTtlMs;
  const ExpiryReport r = cat_->collect_expired("op");
  ASSERT_EQ(r.expired.size(), 1u);
  EXPECT_EQ(r.expired[0].revision_id, lose.id);
  EXPECT_TRUE(blob_on_disk(keep.blob));
  EXPECT_TRUE(
      same_weights(cat_->read_revision("acme", addr("acme", "p", keep.id)).weights, adapter(2)));

  // Too late for the collected one (@latest names it too): not_found naming when.
  for (const Address& a : {addr("acme", "p", lose.id), addr("acme", "p")}) {
    const Caught late = catch_error([&] { cat_->promote_revision("acme", a, "u"); });
    EXPECT_EQ(late.code, ErrorCode::not_found);
    EXPECT_NE(late.message.find("expired at"), std::string::npos) << late.message;
  }
  // Tenant scoping as everywhere.
  EXPECT_EQ(
      catch_error([&] { cat_->promote_revision("other", addr("other", "p", keep.id), "u"); }).code,
      ErrorCode::not_found);
}

TEST_F(ExpiryTest, PromotingTheHeadViaLatest) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision e = commit_ephemeral("acme", "p", 4);
  EXPECT_EQ(cat_->promote_revision("acme", addr("acme", "p"), "u").id, e.id);
  clock_ms_ += 2 * kTtlMs;
  EXPECT_TRUE(cat_->collect_expired("op").expired.empty());
  EXPECT_EQ(cat_->get("acme", addr("acme", "p")).revision.id, e.id);
}

TEST_F(ExpiryTest, RecommitOfIdenticalWeightsAfterCollectionRewritesTheBlob) {
  cat_->create_policy("acme", spec("p"), "t");
  engine::LoraWeights w = adapter(5);
  engine::AdamW adam;
  {
    engine::LoraWeights g = w.clone();
    std::vector<engine::ParamRef> refs;
    for (size_t l = 0; l < w.modules.size(); ++l)
      for (size_t t = 0; t < w.modules[l].size(); ++t) {
        if (w.modules[l][t].empty()) continue;
        const std::string key = engine::lora_module_key(int64_t(l), LoraTarget(t));
        refs.push_back({key + ".lora_A.weight", &w.modules[l][t].A, &g.modules[l][t].A});
        refs.push_back({key + ".lora_B.weight", &w.modules[l][t].B, &g.modules[l][t].B});
      }
    adam.step(refs, {.learning_rate = 1e-2f});
  }
  clock_ms_ += 1000;
  const Revision e = cat_->commit_revision(
      "acme", "p", w, {.actor = "t", .optimizer_state = &adam, .expires_ms = clock_ms_ + kTtlMs});
  ASSERT_TRUE(e.state_blob.has_value());
  clock_ms_ += kTtlMs;
  const ExpiryReport r = cat_->collect_expired("op");
  EXPECT_EQ(r.blobs_deleted, 2);  // weights and optimizer state
  EXPECT_FALSE(blob_on_disk(e.blob));
  EXPECT_FALSE(blob_on_disk(*e.state_blob));

  // The same bytes again, durable this time (a new revision: its parent is the expired one).
  clock_ms_ += 1000;
  const Revision again =
      cat_->commit_revision("acme", "p", w, {.actor = "t", .optimizer_state = &adam});
  EXPECT_NE(again.id, e.id);
  EXPECT_EQ(again.blob, e.blob);
  EXPECT_TRUE(blob_on_disk(again.blob));
  EXPECT_TRUE(blob_on_disk(*again.state_blob));
  EXPECT_TRUE(same_weights(cat_->read_revision("acme", addr("acme", "p")).weights, w));
  EXPECT_EQ(cat_->read_optimizer_state("acme", addr("acme", "p"))->serialize(), adam.serialize());
  EXPECT_TRUE(cat_->check().ok());
}

TEST_F(ExpiryTest, TheSameCommitAgainRevivesOrPromotesTheRevision) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision d = commit("acme", "p", 1);
  const auto redo = [&](int64_t expires_ms) {
    cat_->rollback("acme", addr("acme", "p", d.id), "t");
    return cat_->commit_revision("acme", "p", adapter(2),
                                 {.actor = "t", .step = 1, .expires_ms = expires_ms});
  };
  const Revision e = cat_->commit_revision(
      "acme", "p", adapter(2), {.actor = "t", .step = 1, .expires_ms = clock_ms_ + kTtlMs});
  // Ephemeral again with a later expiry: the later one wins.
  EXPECT_EQ(redo(clock_ms_ + 2 * kTtlMs).expires_ms, clock_ms_ + 2 * kTtlMs);
  EXPECT_EQ(redo(clock_ms_ + kTtlMs / 2).expires_ms, clock_ms_ + 2 * kTtlMs);
  clock_ms_ += 3 * kTtlMs;
  ASSERT_EQ(cat_->collect_expired("op").blobs_deleted, 1);
  // Committed again after collection: the same id, alive again, its blob re-written.
  const Revision revived = redo(clock_ms_ + kTtlMs);
  EXPECT_EQ(revived.id, e.id);
  EXPECT_FALSE(revived.expired);
  EXPECT_EQ(revived.expires_ms, clock_ms_ + kTtlMs);
  EXPECT_TRUE(blob_on_disk(e.blob));
  EXPECT_TRUE(same_weights(cat_->read_revision("acme", addr("acme", "p")).weights, adapter(2)));
  // And durable: the expiry is dropped.
  EXPECT_EQ(redo(0).expires_ms, 0);
  clock_ms_ += 3 * kTtlMs;
  EXPECT_TRUE(cat_->collect_expired("op").expired.empty());
  // A durable revision committed again as ephemeral stays durable.
  EXPECT_EQ(redo(clock_ms_ + kTtlMs).expires_ms, 0);
}

TEST_F(ExpiryTest, ExpiryMustBeInTheFuture) {
  cat_->create_policy("acme", spec("p"), "t");
  for (const int64_t when : {clock_ms_, clock_ms_ - 1, int64_t(-5)}) {
    const Caught err = catch_error([&] {
      cat_->commit_revision("acme", "p", adapter(1), {.actor = "t", .expires_ms = when});
    });
    EXPECT_EQ(err.code, ErrorCode::invalid_argument) << when;
    EXPECT_NE(err.message.find("expires_ms"), std::string::npos) << err.message;
  }
  EXPECT_FALSE(cat_->get_policy("acme", "p").head.has_value());
}

TEST_F(ExpiryTest, CollectsEveryTenantAndManyAtOnce) {
  // More than one collection batch (256 rows), across tenants, in one call.
  for (const std::string tenant : {"t1", "t2"}) {
    cat_->create_policy(tenant, spec("p"), "t");
    for (int i = 0; i < 150; ++i) commit_ephemeral(tenant, "p", uint64_t(1000 + i));
  }
  const Revision durable = commit("t2", "p", 1000);  // shares t1's and t2's first blob
  clock_ms_ += 2 * kTtlMs;
  const ExpiryReport r = cat_->collect_expired("op");
  EXPECT_EQ(r.expired.size(), 300u);
  EXPECT_EQ(r.blobs_deleted, 149);  // 150 distinct blobs, one kept for the durable revision
  EXPECT_TRUE(blob_on_disk(durable.blob));
  EXPECT_EQ(std::count_if(r.expired.begin(), r.expired.end(),
                          [](const ExpiredRevision& e) { return e.tenant == "t1"; }),
            150);
  EXPECT_TRUE(cat_->collect_expired("op").expired.empty());
  EXPECT_TRUE(cat_->check().ok());
}

class ExpiryGcTest : public ExpiryTest {
 protected:
  GcReport gc() {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "blobs"))
      if (e.is_regular_file())
        std::filesystem::last_write_time(e.path(), e.last_write_time() - std::chrono::hours(1));
    return cat_->gc({.actor = "gc",
                     .retention = std::chrono::milliseconds(0),
                     .blob_grace = std::chrono::seconds(0)});
  }
};

TEST_F(ExpiryGcTest, SoftDeletedPolicyWithExpiredRevisionsIsPurged) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision d = commit("acme", "p", 1);
  commit_ephemeral("acme", "p", 2);                                         // collected below
  const Revision pending = commit_ephemeral("acme", "p", 3, 100 * kTtlMs);  // not yet due
  clock_ms_ += 2 * kTtlMs;
  ASSERT_EQ(cat_->collect_expired("op").expired.size(), 1u);
  cat_->remove("acme", "p", "t");
  clock_ms_ += 1000;
  const GcReport r = gc();
  EXPECT_EQ(r.policies_purged, 1);
  EXPECT_EQ(r.revisions_purged, 3);  // their expiry rows go with them
  EXPECT_FALSE(blob_on_disk(d.blob));
  EXPECT_FALSE(blob_on_disk(pending.blob));
  const CheckReport check = cat_->check();
  EXPECT_TRUE(check.ok()) << check.integrity;
  EXPECT_TRUE(check.foreign_keys.empty());
  // Nothing left to collect: the pending row went with its revision.
  clock_ms_ += 200 * kTtlMs;
  EXPECT_TRUE(cat_->collect_expired("op").expired.empty());
}

TEST_F(ExpiryGcTest, BlobOnlyExpiredRevisionsNameIsUnreferenced) {
  cat_->create_policy("acme", spec("eph"), "t");
  cat_->create_policy("acme", spec("dur"), "t");
  const Revision e = commit_ephemeral("acme", "eph", 9);
  const Revision d = commit("acme", "dur", 9);
  ASSERT_EQ(e.blob, d.blob);
  clock_ms_ += 2 * kTtlMs;
  EXPECT_EQ(cat_->collect_expired("op").blobs_deleted, 0);  // still shared with `d`
  EXPECT_EQ(gc().blobs.deleted, 0u);
  cat_->remove("acme", "dur", "t");
  clock_ms_ += 1000;
  const GcReport r = gc();  // `d` goes; only the expired `e` names the blob now
  EXPECT_EQ(r.revisions_purged, 1);
  EXPECT_EQ(r.blobs.deleted, 1u);
  EXPECT_FALSE(blob_on_disk(e.blob));
  EXPECT_TRUE(cat_->lineage("acme", addr("acme", "eph")).revision.expired);
  EXPECT_TRUE(cat_->check().ok());
}

}  // namespace
}  // namespace spindle::catalog::testing
