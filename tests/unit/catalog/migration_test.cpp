// Schema migrations: an older database is migrated forward with its data; newer is refused.

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "catalog_fixture.h"
#include "spindle/catalog/schema.h"

namespace spindle::catalog {
namespace {

using testing::catch_error;

void sql(const std::filesystem::path& dir, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "catalog.db").c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

TEST(Migration, Version1DatabaseIsMigratedWithItsData) {
  const auto dir = testing::fresh_dir("mig");
  migrate(dir, 1);
  EXPECT_EQ(schema_version(dir), 1);
  // Rows as a version-1 Spindle wrote them (no search index yet).
  sql(dir,
      "INSERT INTO tenants(id, name, created_ms) VALUES (1, 'acme', 1);"
      "INSERT INTO base_models VALUES ('tiny', 'qwen3', '', 'c0ffee', 1);"
      "INSERT INTO policies(id, tenant_id, name, base_id, lora_rank, lora_alpha, lora_targets,"
      "  use_rslora, description, created_ms, updated_ms)"
      "  VALUES (1, 1, 'legacy', 'tiny', 4, 8.0, 'q_proj,v_proj', 0, 'trained before search', 5, "
      "5);"
      "INSERT INTO policy_tags VALUES (1, 1, 'vintage', 'legacy');");
  {
    Catalog cat(dir);
    EXPECT_EQ(schema_version(dir), latest_schema_version());
    const auto found = cat.search("acme", "before search");
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].name, "legacy");
    EXPECT_EQ(cat.search("acme", "vintage").size(), 1u);
    EXPECT_EQ(cat.get_policy("acme", "legacy").lora.rank, 4);
    // And the migrated database works as a new one does.
    cat.commit_revision("acme", "legacy", testing::adapter(1), {.actor = "t"});
    cat.tag("acme", "legacy", "migrated", "t");
    EXPECT_EQ(cat.search("acme", "migrated").size(), 1u);
    EXPECT_TRUE(cat.check().ok());
  }
  std::filesystem::remove_all(dir);
}

TEST(Migration, Version4DatabaseGainsUserMetadataAndEphemeralRevisions) {
  const auto dir = testing::fresh_dir("mig4");
  migrate(dir, 4);
  EXPECT_EQ(schema_version(dir), 4);
  // A policy with one (durable) revision as a version-4 Spindle wrote it. The blob is not
  // stored: nothing below reads it.
  const std::string rev(64, 'a'), blob(64, 'b');
  sql(dir,
      "INSERT INTO tenants(id, name, created_ms) VALUES (1, 'acme', 1);"
      "INSERT INTO base_models VALUES ('tiny', 'qwen3', '', 'c0ffee', 1);"
      "INSERT INTO policies(id, tenant_id, name, base_id, lora_rank, lora_alpha, lora_targets,"
      "  use_rslora, description, created_ms, updated_ms)"
      "  VALUES (1, 1, 'old', 'tiny', 4, 8.0, 'q_proj,v_proj', 0, '', 5, 5);"
      "INSERT INTO revisions(seq, id, policy_id, parent_seq, step, blob, bytes, metrics,"
      "  created_ms) VALUES (1, '" + rev + "', 1, NULL, 0, '" + blob + "', 10, '{}', 5);"
      "UPDATE policies SET head_seq = 1 WHERE id = 1;");
  {
    int64_t now = 1'000'000;
    CatalogOptions o;
    o.clock_ms = [&] { return now; };
    Catalog cat(dir, o);
    EXPECT_EQ(schema_version(dir), 5);
    EXPECT_EQ(latest_schema_version(), 5);
    const Resolved r = cat.get("acme", {"acme", "old", ""});
    EXPECT_EQ(r.policy.user_metadata_json, "");  // the column's default
    EXPECT_EQ(r.revision.id, rev);
    EXPECT_EQ(r.revision.expires_ms, 0);  // no expiry row: durable
    EXPECT_FALSE(r.revision.expired);
    // The new features work on the migrated database.
    PolicySpec s;
    s.name = "new";
    s.base_id = "tiny";
    s.lora = {.rank = 4, .alpha = 8.0f, .targets = {engine::LoraTarget::q, engine::LoraTarget::v}};
    s.user_metadata_json = R"({"k": 1})";
    EXPECT_EQ(cat.create_policy("acme", s, "t").user_metadata_json, s.user_metadata_json);
    const Revision e = cat.commit_revision("acme", "new", testing::adapter(1),
                                           {.actor = "t", .expires_ms = now + 10});
    EXPECT_EQ(e.expires_ms, now + 10);
    now += 10;
    EXPECT_EQ(cat.collect_expired("op").expired.size(), 1u);
    EXPECT_TRUE(cat.lineage("acme", {"acme", "new", ""}).revision.expired);
    EXPECT_EQ(cat.check().missing_blobs, std::vector<std::string>{blob});  // only the fake one
  }
  std::filesystem::remove_all(dir);
}

TEST(Migration, NewerDatabaseIsRefused) {
  const auto dir = testing::fresh_dir("newer");
  { Catalog cat(dir); }
  sql(dir, "UPDATE schema_version SET version = 99");
  const auto err = catch_error([&] { Catalog cat(dir); });
  EXPECT_EQ(err.code, ErrorCode::unsupported);
  EXPECT_NE(err.message.find("99"), std::string::npos) << err.message;
  EXPECT_EQ(catch_error([&] { migrate(dir, 1000); }).code, ErrorCode::invalid_argument);
  std::filesystem::remove_all(dir);
}

TEST(Migration, OpeningIsIdempotent) {
  const auto dir = testing::fresh_dir("idem");
  { Catalog a(dir); }
  { Catalog b(dir); }
  EXPECT_EQ(schema_version(dir), latest_schema_version());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace spindle::catalog
