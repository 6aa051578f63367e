// GC: retention, lineage kept for live forks, blob reclamation, check().

#include <gtest/gtest.h>

#include <fstream>

#include "catalog_fixture.h"

namespace spindle::catalog {
namespace {

using testing::catch_error;

class GcTest : public testing::CatalogTest {
 protected:
  // Pretend the blobs were written an hour ago. GC never deletes a blob stamped at or after
  // its start, and filesystem timestamps tick coarsely (a few ms), so a blob written just
  // before gc() may carry the same stamp as gc()'s start and be kept.
  void age_blobs() {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "blobs")) {
      if (e.is_regular_file()) {
        std::filesystem::last_write_time(e.path(),
                                         e.last_write_time() - std::chrono::hours(1));
      }
    }
  }

  GcReport gc(int64_t retention_ms) {
    age_blobs();
    return cat_->gc({.actor = "gc",
                     .retention = std::chrono::milliseconds(retention_ms),
                     .blob_grace = std::chrono::seconds(0)});
  }
};

TEST_F(GcTest, PurgesOnlyAfterRetentionAndReclaimsBlobs) {
  cat_->create_policy("acme", spec("doomed"), "t");
  const Revision r1 = commit("acme", "doomed", 1);
  const Revision r2 = commit("acme", "doomed", 2);
  cat_->create_policy("acme", spec("alive"), "t");
  const Revision a1 = commit("acme", "alive", 3);
  cat_->remove("acme", "doomed", "t");

  clock_ms_ += 1000;
  GcReport early = gc(/*retention_ms=*/60'000);
  EXPECT_EQ(early.policies_purged, 0);
  EXPECT_EQ(early.revisions_purged, 0);
  EXPECT_EQ(early.blobs.deleted, 0u);
  EXPECT_TRUE(cat_->blobs().exists(r1.blob));

  clock_ms_ += 120'000;
  GcReport late = gc(60'000);
  EXPECT_EQ(late.policies_purged, 1);
  EXPECT_EQ(late.revisions_purged, 2);
  EXPECT_EQ(late.blobs.deleted, 2u);
  EXPECT_FALSE(cat_->blobs().exists(r1.blob));
  EXPECT_FALSE(cat_->blobs().exists(r2.blob));
  EXPECT_TRUE(cat_->blobs().exists(a1.blob));
  EXPECT_EQ(cat_->get("acme", addr("acme", "alive")).revision.id, a1.id);
  EXPECT_TRUE(cat_->check().ok());
}

TEST_F(GcTest, RevisionsALiveForkDescendsFromAreKept) {
  cat_->create_policy("acme", spec("src"), "t");
  const Revision r1 = commit("acme", "src", 1);
  const Revision r2 = commit("acme", "src", 2);
  cat_->fork("acme", addr("acme", "src", r1.id), "fork", "t");
  const Revision f1 = commit("acme", "fork", 3);
  cat_->remove("acme", "src", "t");
  clock_ms_ += 10'000;
  const GcReport g = gc(0);
  EXPECT_EQ(g.revisions_purged, 1);  // r2 only
  EXPECT_EQ(g.policies_purged, 0);
  EXPECT_EQ(g.policies_waiting, 1);  // src stays a tombstone for r1
  EXPECT_FALSE(cat_->blobs().exists(r2.blob));
  // The fork still reads its whole lineage.
  const Lineage l = cat_->lineage("acme", addr("acme", "fork"));
  ASSERT_EQ(l.ancestors.size(), 1u);
  EXPECT_EQ(l.ancestors[0].revision.id, r1.id);
  EXPECT_TRUE(l.ancestors[0].revision.policy_deleted);
  EXPECT_NO_THROW(cat_->read_revision("acme", addr("acme", "fork", r1.id)));
  EXPECT_TRUE(cat_->check().ok());

  cat_->remove("acme", "fork", "t");
  clock_ms_ += 10'000;
  const GcReport g2 = gc(0);
  EXPECT_EQ(g2.revisions_purged, 2);  // r1 and f1
  EXPECT_EQ(g2.policies_purged, 2);
  EXPECT_EQ(g2.policies_waiting, 0);
  EXPECT_FALSE(cat_->blobs().exists(f1.blob));
  EXPECT_TRUE(cat_->check().ok());
}

TEST_F(GcTest, OrphanBlobsAreReclaimedAndReferencedOnesKept) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision r1 = commit("acme", "p", 1);
  const std::string orphan = cat_->blobs().put("a blob whose commit never happened");
  const GcReport g = gc(0);
  EXPECT_EQ(g.blobs.deleted, 1u);
  EXPECT_FALSE(cat_->blobs().exists(orphan));
  EXPECT_TRUE(cat_->blobs().exists(r1.blob));
  // With the default grace (an hour) an orphan that young is left for an in-flight commit.
  const std::string young = cat_->blobs().put("just written");
  EXPECT_EQ(cat_->gc({.actor = "gc", .retention = std::chrono::hours(1)}).blobs.deleted, 0u);
  EXPECT_TRUE(cat_->blobs().exists(young));
}

TEST_F(GcTest, CheckReportsAMissingBlobAndReadReportsACorruptOne) {
  cat_->create_policy("acme", spec("p"), "t");
  const Revision r1 = commit("acme", "p", 1);
  const Revision r2 = commit("acme", "p", 2);
  {
    const auto path = cat_->blobs().path_of(r1.blob);
    std::string bytes = cat_->blobs().get(r1.blob);
    bytes[bytes.size() / 2] ^= 1;
    std::filesystem::remove(path);
    std::ofstream(path, std::ios::binary) << bytes;
  }
  const auto err = catch_error([&] { cat_->read_revision("acme", addr("acme", "p", r1.id)); });
  EXPECT_EQ(err.code, ErrorCode::data_loss);
  EXPECT_NE(err.message.find(r1.blob), std::string::npos) << err.message;
  std::filesystem::remove(cat_->blobs().path_of(r2.blob));
  const CheckReport c = cat_->check();
  EXPECT_EQ(c.integrity, "ok");
  EXPECT_EQ(c.revisions, 2);
  EXPECT_EQ(c.missing_blobs, (std::vector<std::string>{r2.blob}));
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace spindle::catalog
