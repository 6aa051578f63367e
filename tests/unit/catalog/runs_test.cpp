// Run records (schema v4): lifecycle, metrics timeline, paging, tenant scoping, interruption
// on restart, and migration of a version-3 database.

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <set>

#include "catalog_fixture.h"
#include "spindle/catalog/schema.h"

namespace spindle::catalog {
namespace {

using testing::catch_error;
using testing::CatalogTest;

class RunsTest : public CatalogTest {
 protected:
  RunRecord make_run(const std::string& tenant, int64_t steps = 3) {
    RunRecord r;
    r.config_json = R"({"steps": )" + std::to_string(steps) + "}";
    r.steps = steps;
    r.policies = {"spindle://" + tenant + "/a", "spindle://" + tenant + "/b"};
    clock_ms_ += 10;
    return cat_->create_run(tenant, r, "test");
  }
};

TEST_F(RunsTest, CreateUpdateGetRoundTrips) {
  const RunRecord r = make_run("acme");
  EXPECT_EQ(r.id.size(), 16u);
  EXPECT_EQ(r.tenant, "acme");
  EXPECT_EQ(r.status, "queued");
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.step, 0);
  EXPECT_EQ(r.created_ms, clock_ms_);
  EXPECT_EQ(r.policies, (std::vector<std::string>{"spindle://acme/a", "spindle://acme/b"}));

  clock_ms_ += 500;
  const RunRecord u = cat_->update_run("acme", r.id, {.status = "running", .step = 2});
  EXPECT_EQ(u.status, "running");
  EXPECT_EQ(u.step, 2);
  EXPECT_EQ(u.updated_ms, clock_ms_);
  EXPECT_EQ(u.created_ms, r.created_ms);
  EXPECT_EQ(u.policies, r.policies);  // kept
  const RunRecord g = cat_->get_run("acme", r.id);
  EXPECT_EQ(g.status, "running");
  EXPECT_EQ(g.config_json, r.config_json);

  cat_->update_run("acme", r.id, {.status = "failed", .error = "boom"});
  EXPECT_EQ(cat_->get_run("acme", r.id).error, "boom");
  EXPECT_EQ(catch_error([&] { cat_->update_run("acme", r.id, {.status = "exploded"}); }).code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(catch_error([&] {
              RunRecord bad;
              bad.config_json = "[1]";
              cat_->create_run("acme", bad, "t");
            }).code,
            ErrorCode::invalid_argument);
}

TEST_F(RunsTest, MetricsTimelineIsOrderedAndReRecordedStepsReplace) {
  const RunRecord r = make_run("acme");
  for (int64_t step : {0, 1, 2}) {
    for (const char* p : {"b", "a"}) {
      cat_->append_run_metrics("acme", r.id,
                               {.step = step, .policy = p, .metrics_json = R"({"reward": 0.5})"});
    }
  }
  // A resumed run records step 2 again: the row is replaced, not duplicated.
  cat_->append_run_metrics("acme", r.id, {.step = 2, .policy = "a", .metrics_json = R"({"reward":1})"});
  const auto all = cat_->run_metrics("acme", r.id);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[0].step, 0);
  EXPECT_EQ(all[0].policy, "a");
  EXPECT_EQ(all[1].policy, "b");
  EXPECT_EQ(all[4].metrics_json, R"({"reward":1})");
  const auto since = cat_->run_metrics("acme", r.id, 2);
  ASSERT_EQ(since.size(), 2u);
  EXPECT_EQ(since[0].step, 2);
  EXPECT_EQ(catch_error([&] {
              cat_->append_run_metrics("acme", r.id, {.step = 3, .policy = "a", .metrics_json = "[]"});
            }).code,
            ErrorCode::invalid_argument);
}

TEST_F(RunsTest, ListPagesNewestFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(make_run("acme").id);
  make_run("other");
  std::vector<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    const RunPage page = cat_->list_runs("acme", {.limit = 2, .cursor = cursor});
    for (const auto& r : page.items) seen.push_back(r.id);
    cursor = page.next_cursor;
    ++pages;
  } while (!cursor.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend()));
  EXPECT_TRUE(cat_->list_runs("nobody").items.empty());
  EXPECT_EQ(catch_error([&] { cat_->list_runs("acme", {.limit = 2, .cursor = "x"}); }).code,
            ErrorCode::invalid_argument);
}

TEST_F(RunsTest, AnotherTenantsRunIsNotFoundLikeAMissingOne) {
  const RunRecord r = make_run("acme");
  const auto other = catch_error([&] { cat_->get_run("evil", r.id); });
  const auto missing = catch_error([&] { cat_->get_run("acme", "0000000000000000"); });
  EXPECT_EQ(other.code, ErrorCode::not_found);
  EXPECT_EQ(missing.code, ErrorCode::not_found);
  make_run("evil");  // the tenant exists now: still not found
  const auto other2 = catch_error([&] { cat_->get_run("evil", r.id); });
  EXPECT_EQ(other2.code, ErrorCode::not_found);
  EXPECT_EQ(other2.message.find("evil"), std::string::npos);
  EXPECT_EQ(catch_error([&] { cat_->update_run("evil", r.id, {.status = "stopped"}); }).code,
            ErrorCode::not_found);
  EXPECT_EQ(catch_error([&] { cat_->run_metrics("evil", r.id); }).code, ErrorCode::not_found);
  EXPECT_EQ(catch_error([&] {
              cat_->append_run_metrics("evil", r.id, {.step = 0, .policy = "a", .metrics_json = "{}"});
            }).code,
            ErrorCode::not_found);
  EXPECT_EQ(cat_->get_run("acme", r.id).status, "queued");
}

TEST_F(RunsTest, RunningRunsBecomeStoppedOnInterrupt) {
  const RunRecord a = make_run("acme");
  const RunRecord b = make_run("acme");
  const RunRecord c = make_run("zeta");
  cat_->update_run("acme", a.id, {.status = "running", .step = 1});
  cat_->update_run("acme", b.id, {.status = "done", .step = 3});
  cat_->update_run("zeta", c.id, {.status = "running"});
  cat_.reset();
  cat_ = open();  // as a restarted daemon does
  const auto ids = cat_->interrupt_running_runs("spindled");
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()), (std::set<std::string>{a.id, c.id}));
  EXPECT_EQ(cat_->get_run("acme", a.id).status, "stopped");
  EXPECT_EQ(cat_->get_run("acme", a.id).step, 1);
  EXPECT_EQ(cat_->get_run("acme", b.id).status, "done");
  EXPECT_EQ(cat_->get_run("zeta", c.id).status, "stopped");
  EXPECT_TRUE(cat_->interrupt_running_runs("spindled").empty());
  EXPECT_TRUE(cat_->check().ok());
}

TEST(RunsMigration, Version3DatabaseGainsRunTables) {
  const auto dir = testing::fresh_dir("mig3");
  migrate(dir, 3);
  EXPECT_EQ(schema_version(dir), 3);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir / "catalog.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "INSERT INTO tenants(id, name, created_ms) VALUES (1, 'acme', 1);"
                           "INSERT INTO base_models VALUES ('tiny', 'qwen3', '', 'c0ffee', 1);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  {
    Catalog cat(dir);
    EXPECT_EQ(schema_version(dir), latest_schema_version());  // run tables arrive in version 4
    EXPECT_GE(latest_schema_version(), 4);
    RunRecord r;
    r.config_json = "{}";
    r.steps = 2;
    const RunRecord made = cat.create_run("acme", r, "t");
    cat.append_run_metrics("acme", made.id, {.step = 1, .policy = "p", .metrics_json = "{}"});
    EXPECT_EQ(cat.run_metrics("acme", made.id).size(), 1u);
    EXPECT_EQ(cat.list_runs("acme").items.size(), 1u);
    EXPECT_TRUE(cat.check().ok());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace spindle::catalog
