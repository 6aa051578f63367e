#pragma once
// A thin RAII layer over SQLite's C API for the catalog.
//
// Errors: every return code goes through SQLITE_CHECK, which throws spindle::Error naming the
// statement (or operation), sqlite3_errmsg and the source location. Codes map to
// ErrorCode: BUSY/LOCKED -> resource; FULL, and IOERR whose errno is ENOSPC/EDQUOT ->
// resource naming the database file (disk full); CONSTRAINT -> invalid_argument;
// CORRUPT/NOTADB -> data_loss naming the file; other IOERR, CANTOPEN/READONLY/PERM -> io;
// anything else -> internal.
//
// Threading: a Db is one connection, used by one thread at a time (opened NOMUTEX). Its
// prepared-statement cache is per connection; a cached statement is borrowed by one Query at
// a time (re-borrowing one still in use is an internal error, not silent corruption).

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace spindle::catalog::detail {

[[noreturn]] void throw_sqlite(sqlite3* db, int rc, std::string_view what, const char* file,
                               int line);

#define SQLITE_CHECK(db, expr, what)                                                          \
  do {                                                                                        \
    const int sqlite_rc_ = (expr);                                                            \
    if (sqlite_rc_ != SQLITE_OK && sqlite_rc_ != SQLITE_ROW && sqlite_rc_ != SQLITE_DONE)     \
        [[unlikely]] {                                                                        \
      ::spindle::catalog::detail::throw_sqlite((db), sqlite_rc_, (what), __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

struct CachedStmt {
  sqlite3_stmt* stmt = nullptr;
  std::string sql;
  bool in_use = false;
};

// A borrowed prepared statement. Binding indexes are 1-based (SQLite's ?N), columns 0-based.
// The destructor resets the statement and clears its bindings, returning it to the cache.
class Query {
 public:
  Query(sqlite3* db, CachedStmt& s);
  ~Query();
  Query(Query&& other) noexcept;
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  Query& operator=(Query&&) = delete;

  Query& bind(int i, int64_t v);
  Query& bind(int i, double v);
  Query& bind(int i, std::string_view v);
  Query& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Query& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Query& bind(int i, const std::optional<std::string>& v);
  Query& bind(int i, const std::optional<int64_t>& v);
  Query& bind_null(int i);

  // Steps once: true when a row is available, false when done.
  bool step();
  // Steps to completion; throws internal if the statement yields a row.
  void run();

  int64_t int64(int col) const;
  double real(int col) const;
  std::string text(int col) const;  // "" for NULL
  std::optional<std::string> opt_text(int col) const;
  std::optional<int64_t> opt_int64(int col) const;
  bool is_null(int col) const;

 private:
  sqlite3* db_;
  CachedStmt* s_;
};

class Db {
 public:
  struct Options {
    int busy_timeout_ms = 10000;
    int64_t cache_kib = 65536;
    // PRAGMA quick_check at open: a damaged file throws data_loss naming it and the problems.
    bool quick_check = false;
  };
  // Opens (creating if missing) with WAL, synchronous=FULL, foreign_keys=ON, busy_timeout.
  Db(const std::filesystem::path& file, const Options& options);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements without results (DDL, PRAGMA, BEGIN/COMMIT).
  void exec(std::string_view sql);
  // The cached prepared statement for `sql` (prepared on first use).
  Query query(std::string_view sql);
  // One integer from a single-row query (e.g. COUNT), or nullopt for no row / NULL.
  std::optional<int64_t> scalar(std::string_view sql);

  int64_t last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
  int64_t changes() const { return sqlite3_changes64(db_); }
  bool in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }
  sqlite3* raw() const { return db_; }
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<CachedStmt>> cache_;
};

// BEGIN IMMEDIATE (take the write lock up front, so a reader never has to upgrade and fail
// with BUSY mid-transaction) ... commit(); rolls back in the destructor unless committed.
// With synchronous=FULL in WAL mode, commit() returns after the WAL is fsynced: durable.
class WriteTxn {
 public:
  explicit WriteTxn(Db& db);
  ~WriteTxn();
  WriteTxn(const WriteTxn&) = delete;
  WriteTxn& operator=(const WriteTxn&) = delete;
  void commit();

 private:
  Db& db_;
  bool done_ = false;
};

// A read snapshot across several statements (BEGIN DEFERRED ... COMMIT).
class ReadTxn {
 public:
  explicit ReadTxn(Db& db);
  ~ReadTxn();
  ReadTxn(const ReadTxn&) = delete;
  ReadTxn& operator=(const ReadTxn&) = delete;

 private:
  Db& db_;
  bool owns_ = false;
};

}  // namespace spindle::catalog::detail
