#pragma once
// Internal: the migration runner on an open connection.

#include "sqlite_db.h"

namespace spindle::catalog::detail {

int read_schema_version(Db& db);
// Applies migrations (current, target] in one write transaction. Throws unsupported when the
// database is newer than this build, invalid_argument when target is out of range.
void migrate_db(Db& db, int target);

}  // namespace spindle::catalog::detail
