#include "fts_rank.h"

#include <cmath>
#include <vector>

#include "sqlite_db.h"

namespace spindle::catalog::detail {
namespace {

constexpr double kK1 = 1.2;
constexpr double kB = 0.75;
constexpr double kColumnWeight[] = {0.0, 4.0, 1.0, 2.0};  // tenant, name, description, tags

// Per-query state, computed at the first row and kept as FTS5 auxdata.
struct QueryStats {
  double avgdl = 1;
  std::vector<double> idf;  // [phrase]; idf[0] unused (the tenant term)
};

int count_row(const Fts5ExtensionApi*, Fts5Context*, void* user) {
  ++*static_cast<int64_t*>(user);
  return SQLITE_OK;
}

QueryStats* query_stats(const Fts5ExtensionApi* api, Fts5Context* fts, int* rc) {
  if (auto* s = static_cast<QueryStats*>(api->xGetAuxdata(fts, 0))) return s;
  auto* s = new QueryStats;
  sqlite3_int64 rows = 0, tokens = 0;
  *rc = api->xRowCount(fts, &rows);
  if (*rc == SQLITE_OK) *rc = api->xColumnTotalSize(fts, -1, &tokens);
  s->avgdl = rows > 0 ? std::max(1.0, double(tokens) / double(rows)) : 1.0;
  const int phrases = api->xPhraseCount(fts);
  s->idf.assign(size_t(phrases), 0.0);
  for (int i = 1; i < phrases && *rc == SQLITE_OK; ++i) {
    int64_t hits = 0;
    *rc = api->xQueryPhrase(fts, i, &hits, count_row);
    double idf = std::log((double(rows) - double(hits) + 0.5) / (double(hits) + 0.5));
    s->idf[size_t(i)] = idf <= 0 ? 1e-6 : idf;
  }
  if (*rc != SQLITE_OK) {
    delete s;
    return nullptr;
  }
  *rc = api->xSetAuxdata(fts, s, [](void* p) { delete static_cast<QueryStats*>(p); });
  return *rc == SQLITE_OK ? s : nullptr;
}

void spindle_rank(const Fts5ExtensionApi* api, Fts5Context* fts, sqlite3_context* ctx, int,
                  sqlite3_value**) {
  int rc = SQLITE_OK;
  const QueryStats* s = query_stats(api, fts, &rc);
  if (!s) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  int doc_tokens = 0;
  rc = api->xColumnSize(fts, -1, &doc_tokens);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  const int columns = api->xColumnCount(fts);
  const double norm = kK1 * (1 - kB + kB * double(doc_tokens) / s->avgdl);
  double score = 0;
  for (int i = 1; i < int(s->idf.size()); ++i) {
    double freq = 0;
    Fts5PhraseIter it;
    int col = 0, off = 0;
    rc = api->xPhraseFirst(fts, i, &it, &col, &off);
    if (rc != SQLITE_OK) {
      sqlite3_result_error_code(ctx, rc);
      return;
    }
    for (; col >= 0; api->xPhraseNext(fts, &it, &col, &off)) {
      if (col < columns && col < int(std::size(kColumnWeight))) freq += kColumnWeight[col];
    }
    score += s->idf[size_t(i)] * freq * (kK1 + 1) / (freq + norm);
  }
  sqlite3_result_double(ctx, -score);
}

}  // namespace

void register_fts_rank(sqlite3* db) {
  fts5_api* api = nullptr;
  sqlite3_stmt* stmt = nullptr;
  SQLITE_CHECK(db, sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &stmt, nullptr),
               "SELECT fts5(?1)");
  sqlite3_bind_pointer(stmt, 1, static_cast<void*>(&api), "fts5_api_ptr", nullptr);
  sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  SQLITE_CHECK(db, api ? SQLITE_OK : SQLITE_ERROR, "FTS5 is not available in this SQLite");
  SQLITE_CHECK(db, api->xCreateFunction(api, "spindle_rank", nullptr, spindle_rank, nullptr),
               "register spindle_rank");
}

}  // namespace spindle::catalog::detail
