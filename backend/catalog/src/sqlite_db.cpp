#include "sqlite_db.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "spindle/core/error.h"

namespace spindle::catalog::detail {
namespace {

// `sys_errno`: sqlite3_system_errno of the failing call. SQLite reports ENOSPC on a write as
// SQLITE_FULL but EDQUOT, and ENOSPC at fsync or when growing the -shm, as SQLITE_IOERR_*.
ErrorCode code_for(int rc, int sys_errno) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_FULL:
      return ErrorCode::resource;
    case SQLITE_CONSTRAINT:
      return ErrorCode::invalid_argument;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return ErrorCode::data_loss;
    case SQLITE_IOERR:
      return sys_errno == ENOSPC || sys_errno == EDQUOT ? ErrorCode::resource : ErrorCode::io;
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return ErrorCode::io;
    default:
      return ErrorCode::internal;
  }
}

std::string db_file(sqlite3* db) {
  const char* f = db ? sqlite3_db_filename(db, "main") : nullptr;
  return f && *f ? f : "catalog.db";
}

// The message for a failed SQLite call: what SQLite said, the statement, and for a full disk
// or a damaged file the database's path and what to do.
std::string describe(sqlite3* db, int rc, const std::string& sqlite_msg, std::string_view what) {
  const int sys = db ? sqlite3_system_errno(db) : 0;
  const ErrorCode code = code_for(rc, sys);
  // The errno belongs to the last failed OS call: only worth showing for an I/O failure.
  const int primary = rc & 0xff;
  const bool os_failure = primary == SQLITE_IOERR || primary == SQLITE_FULL ||
                          primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY ||
                          primary == SQLITE_PERM;
  const std::string errno_part =
      os_failure && sys ? fmt::format(", errno {} {}", sys, std::strerror(sys)) : "";
  if (code == ErrorCode::resource && os_failure) {
    return fmt::format(
        "catalog {}: no space left for the database (disk full or quota): sqlite: {} (code {}{}) "
        "in: {}; nothing of this write was committed, free space and retry",
        db_file(db), sqlite_msg, rc, errno_part, what);
  }
  if (code == ErrorCode::data_loss) {
    return fmt::format(
        "catalog {} is damaged: sqlite: {} (code {}) in: {}; restore catalog.db from a "
        "backup (`spindle catalog check` reports what is wrong)",
        db_file(db), sqlite_msg, rc, what);
  }
  return fmt::format("catalog: sqlite: {} (code {}{}) in: {}", sqlite_msg, rc, errno_part, what);
}

}  // namespace

void throw_sqlite(sqlite3* db, int rc, std::string_view what, const char* file, int line) {
  const char* msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string where = file;
  if (const size_t slash = where.rfind('/'); slash != std::string::npos) where.erase(0, slash + 1);
  const int sys = db ? sqlite3_system_errno(db) : 0;
  throw Error(code_for(rc, sys),
              fmt::format("{} [{}:{}]", describe(db, rc, msg, what), where, line));
}

// ---- Query -------------------------------------------------------------------------------

Query::Query(sqlite3* db, CachedStmt& s) : db_(db), s_(&s) {
  SPINDLE_CHECK(!s.in_use, internal, "catalog: statement borrowed twice: {}", s.sql);
  s.in_use = true;
}

Query::Query(Query&& other) noexcept : db_(other.db_), s_(other.s_) {
  other.s_ = nullptr;
}

Query::~Query() {
  if (!s_) return;
  sqlite3_reset(s_->stmt);
  sqlite3_clear_bindings(s_->stmt);
  s_->in_use = false;
}

Query& Query::bind(int i, int64_t v) {
  SQLITE_CHECK(db_, sqlite3_bind_int64(s_->stmt, i, v), s_->sql);
  return *this;
}

Query& Query::bind(int i, double v) {
  SQLITE_CHECK(db_, sqlite3_bind_double(s_->stmt, i, v), s_->sql);
  return *this;
}

Query& Query::bind(int i, std::string_view v) {
  SQLITE_CHECK(db_,
               sqlite3_bind_text64(s_->stmt, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
               s_->sql);
  return *this;
}

Query& Query::bind(int i, const std::optional<std::string>& v) {
  return v ? bind(i, std::string_view(*v)) : bind_null(i);
}

Query& Query::bind(int i, const std::optional<int64_t>& v) {
  return v ? bind(i, *v) : bind_null(i);
}

Query& Query::bind_null(int i) {
  SQLITE_CHECK(db_, sqlite3_bind_null(s_->stmt, i), s_->sql);
  return *this;
}

bool Query::step() {
  const int rc = sqlite3_step(s_->stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_sqlite(db_, rc, s_->sql, __FILE__, __LINE__);
}

void Query::run() {
  SPINDLE_CHECK(!step(), internal, "catalog: statement unexpectedly returned rows: {}", s_->sql);
}

int64_t Query::int64(int col) const {
  return sqlite3_column_int64(s_->stmt, col);
}
double Query::real(int col) const {
  return sqlite3_column_double(s_->stmt, col);
}
bool Query::is_null(int col) const {
  return sqlite3_column_type(s_->stmt, col) == SQLITE_NULL;
}

std::string Query::text(int col) const {
  const auto* p = sqlite3_column_text(s_->stmt, col);
  if (!p) return {};
  return std::string(reinterpret_cast<const char*>(p), size_t(sqlite3_column_bytes(s_->stmt, col)));
}

std::optional<std::string> Query::opt_text(int col) const {
  if (is_null(col)) return std::nullopt;
  return text(col);
}

std::optional<int64_t> Query::opt_int64(int col) const {
  if (is_null(col)) return std::nullopt;
  return int64(col);
}

// ---- Db ----------------------------------------------------------------------------------

Db::Db(const std::filesystem::path& file, const Options& options) : file_(file) {
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(file.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    const int sys = db_ ? sqlite3_system_errno(db_) : 0;
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw Error(code_for(rc, sys), fmt::format("catalog: cannot open {}: {}", file.string(), msg));
  }
  try {
    sqlite3_extended_result_codes(db_, 1);
    SQLITE_CHECK(db_, sqlite3_busy_timeout(db_, options.busy_timeout_ms), "busy_timeout");
    // WAL: readers never block the writer. synchronous=FULL: a commit fsyncs the WAL, so an
    // acknowledged commit survives power loss (NORMAL would only survive a process crash).
    {
      auto mode = query("PRAGMA journal_mode=WAL");
      SPINDLE_CHECK(mode.step() && mode.text(0) == "wal", io,
                    "catalog: {} cannot use WAL journaling (a network or read-only "
                    "filesystem?)",
                    file.string());
    }
    exec(
        fmt::format("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY; "
                    "PRAGMA cache_size=-{};",
                    options.cache_kib));
    if (options.quick_check) {
      // Before anything writes (a migration on a damaged file could spread the damage).
      std::string problems;
      int n = 0;
      {
        auto q = query("PRAGMA quick_check(8)");
        while (q.step()) {
          const std::string line = q.text(0);
          if (line == "ok") continue;
          problems += (problems.empty() ? "" : "; ") + line;
          ++n;
        }
      }
      SPINDLE_CHECK(problems.empty(), data_loss,
                    "catalog {} is damaged, refusing to open it: PRAGMA quick_check found {}{}: "
                    "{}. Restore catalog.db from a backup; `spindle catalog check` reports the "
                    "full integrity_check",
                    file.string(), n, n >= 8 ? "+ problems" : n == 1 ? " problem" : " problems",
                    problems);
    }
  } catch (...) {
    for (auto& [sql, s] : cache_) sqlite3_finalize(s->stmt);
    cache_.clear();
    sqlite3_close_v2(db_);
    throw;
  }
}

Db::~Db() {
  for (auto& [sql, s] : cache_) sqlite3_finalize(s->stmt);
  sqlite3_close_v2(db_);
}

void Db::exec(std::string_view sql) {
  const std::string s(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw Error(code_for(rc, sqlite3_system_errno(db_)), describe(db_, rc, msg, s));
  }
}

Query Db::query(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it == cache_.end()) {
    auto s = std::make_unique<CachedStmt>();
    s->sql = std::string(sql);
    SQLITE_CHECK(db_,
                 sqlite3_prepare_v3(db_, s->sql.c_str(), int(s->sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &s->stmt, nullptr),
                 s->sql);
    it = cache_.emplace(s->sql, std::move(s)).first;
  }
  return Query(db_, *it->second);
}

std::optional<int64_t> Db::scalar(std::string_view sql) {
  auto q = query(sql);
  if (!q.step()) return std::nullopt;
  return q.opt_int64(0);
}

// ---- transactions ------------------------------------------------------------------------

WriteTxn::WriteTxn(Db& db) : db_(db) {
  SPINDLE_CHECK(!db.in_transaction(), internal, "catalog: nested write transaction");
  db_.query("BEGIN IMMEDIATE").run();
}

WriteTxn::~WriteTxn() {
  if (!done_ && db_.in_transaction())
    sqlite3_exec(db_.raw(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void WriteTxn::commit() {
  db_.query("COMMIT").run();
  done_ = true;
}

ReadTxn::ReadTxn(Db& db) : db_(db) {
  if (!db.in_transaction()) {
    db_.query("BEGIN").run();
    owns_ = true;
  }
}

ReadTxn::~ReadTxn() {
  // A read-only transaction: ending it cannot fail in a way that loses anything.
  if (!owns_ || !db_.in_transaction()) return;
  try {
    db_.query("COMMIT").run();
  } catch (...) {
    sqlite3_exec(db_.raw(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

}  // namespace spindle::catalog::detail
