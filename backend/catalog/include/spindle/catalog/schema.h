#pragma once
// Catalog schema versions. The database records its version in the one-row table
// `schema_version`; opening a Catalog applies every newer migration, all in one transaction
// (a crash mid-migration leaves the old version intact). Migrations only move forward.
//   1  tenants, base_models, policies, policy_tags, revisions, audit
//   2  policy_fts (FTS5 over name, description, tags) kept in sync by triggers; backfilled

#include <filesystem>

namespace spindle::catalog {

int latest_schema_version();
// The version of <data_dir>/catalog.db (0 for a new or empty database).
int schema_version(const std::filesystem::path& data_dir);
// Migrates <data_dir>/catalog.db forward to `target` (<= latest). Used by Catalog's
// constructor (target = latest) and by tests that need an older schema.
void migrate(const std::filesystem::path& data_dir, int target);

}  // namespace spindle::catalog
