// The catalog model pages through >= 10 000 bulk-registered policies and search finds one.
//
// There is no bulk op on the wire, so this suite fills its own data dir: a first daemon creates
// a seed policy with one saved revision and stops; `spindle catalog bulk-register` (the CLI on
// the local data dir, which needs the daemon gone) registers 10 000 policies sharing the seed's
// revision; then the suite's daemon opens that dir.

#include "catalog_test_util.h"
#include "run_spindle.h"
#include "studio_fixture.h"

namespace spindle::testing {
namespace {

using ui::CatalogModel;

constexpr int kBulk = 10000;

class CatalogBulkTest : public StudioTest {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(stories_model_path())) return;
    dir_ = fresh_gui_dir("bulk");
    const std::vector<std::string> args{"--model", stories_model_path().string()};
    {
      SpindledProcess seed(binary_dir() / "app" / "spindled", dir_, args, /*ready_timeout_s=*/60);
      protocol::ClientOptions o;
      o.endpoint = seed.endpoints().at(0);
      o.token = kAliceToken;
      o.timeout_ms = 120000;
      protocol::Client c(o);
      make_policy(c, "aaa-seed", 1, "the seed of the bulk suite");
      seed.terminate();
    }
    const RunResult r = run_spindle({"catalog", "--data-dir", dir_.string(), "--tenant", "alice",
                                     "bulk-register", "aaa-seed", "--count", std::to_string(kBulk),
                                     "--prefix", "bulk", "--batch", "2500"});
    bulk_error_ = r.exit_code == 0 ? "" : "bulk-register failed: " + r.err + r.out;
    daemon_ = std::make_unique<SpindledProcess>(binary_dir() / "app" / "spindled", dir_, args,
                                                /*ready_timeout_s=*/60);
  }
  void SetUp() override {
    StudioTest::SetUp();
    if (!IsSkipped()) ASSERT_TRUE(bulk_error_.empty()) << bulk_error_;
  }
  static inline std::string bulk_error_;
};

TEST_F(CatalogBulkTest, PagesThroughAllRowsAndSearchFindsOne) {
  auto conn = open_connection();
  CatalogModel model(conn.get());
  QSignalSpy loaded(&model, &CatalogModel::loaded);
  model.reset();
  // Qt's fetchmore pattern, as a view drives it: fetch whenever the last page has arrived.
  ASSERT_TRUE(QTest::qWaitFor([&] {
    if (!model.isLoading() && model.canFetchMore()) model.fetchMore();
    return !model.isLoading() && !model.canFetchMore();
  }, 300000)) << model.rowCount() << " rows so far";
  EXPECT_TRUE(model.lastErrorCode().isEmpty()) << model.lastErrorMessage().toStdString();
  EXPECT_EQ(model.rowCount(), kBulk + 1);  // + the seed
  // Every page but the last was full, at most one request in flight: pages = ceil(n / size).
  EXPECT_EQ(model.pageRequests(), quint64((kBulk + 1 + CatalogModel::kPageSize - 1) /
                                          CatalogModel::kPageSize));
  EXPECT_EQ(model.policyAt(0).name, "aaa-seed");
  for (int i = 1; i < model.rowCount(); ++i) {
    ASSERT_LT(model.policyAt(i - 1).name, model.policyAt(i).name) << "row " << i;
  }
  EXPECT_EQ(model.policyAt(model.rowCount() - 1).name, "bulk-009999");
  for (int i : {1, 4242, kBulk}) EXPECT_FALSE(model.policyAt(i).head.empty()) << i;

  // Full-text search for one description ("bulk copy 4711 of aaa-seed") finds that policy.
  auto c = client();
  const auto expected = c->catalog_search("4711", CatalogModel::kSearchLimit);
  model.search("4711");
  ASSERT_TRUE(QTest::qWaitFor([&] { return !model.isLoading(); }, 60000));
  ASSERT_GE(model.rowCount(), 1);
  EXPECT_EQ(model.rowCount(), int(expected.policies.size()));
  EXPECT_GE(model.rowOfName("bulk-004711"), 0);
  EXPECT_FALSE(model.canFetchMore());
}

TEST_F(CatalogBulkTest, PrefetchRunsAheadOfTheViewport) {
  auto conn = open_connection();
  CatalogModel model(conn.get());
  model.reset();
  // The view scrolled to row 1000 at once: the model keeps paging (one request at a time)
  // until that row exists, without anyone calling fetchMore.
  model.ensureLoaded(1000);
  ASSERT_TRUE(QTest::qWaitFor([&] { return model.rowCount() > 1000 && !model.isLoading(); },
                              120000));
  EXPECT_TRUE(model.canFetchMore());
  EXPECT_LE(model.rowCount(), 1000 + CatalogModel::kPageSize);
}

}  // namespace
}  // namespace spindle::testing
