#pragma once
// spindle_rank(policy_fts): the FTS5 auxiliary function search orders by.

#include <sqlite3.h>

namespace spindle::catalog::detail {

// Registers spindle_rank on this connection. It is Okapi BM25 (k1 1.2, b 0.75) as FTS5's
// built-in bm25() computes it, except that phrase 0 — the tenant token every search query
// starts with — is left out. bm25() would compute that phrase's document frequency by
// walking its doclist (one entry per policy of the tenant: ~25 ms at 10^6 policies, per
// query) only to give a constant term. Column weights: tenant 0, name 4, description 1,
// tags 2. Lower is better (like bm25()).
void register_fts_rank(sqlite3* db);

}  // namespace spindle::catalog::detail
