// Crash durability: a child commits revisions in a loop and is SIGKILLed at random moments
// (SPINDLE_DURABILITY_KILLS times, default 50; SPINDLE_DURABILITY_SEED picks the moments).
// After every kill: the database passes integrity_check and foreign_key_check, every
// revision the child acknowledged reads back with a verified checksum and the exact weights,
// no row points at a missing blob, and GC reclaims every orphan blob and temp file.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "helper/commit_loop_common.h"
#include "spindle/core/error.h"

namespace spindle::catalog {
namespace {

namespace fs = std::filesystem;
using namespace durability;
using Clock = std::chrono::steady_clock;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

bool same(const engine::LoraWeights& a, const engine::LoraWeights& b) {
  if (a.modules.size() != b.modules.size() || a.rank != b.rank || a.alpha != b.alpha) return false;
  for (size_t l = 0; l < a.modules.size(); ++l) {
    for (size_t t = 0; t < a.modules[l].size(); ++t) {
      const auto& x = a.modules[l][t];
      const auto& y = b.modules[l][t];
      if (x.A.shape() != y.A.shape() || x.B.shape() != y.B.shape()) return false;
      if (!x.A.empty() && (std::memcmp(x.A.data(), y.A.data(), x.A.bytes()) != 0 ||
                           std::memcmp(x.B.data(), y.B.data(), x.B.bytes()) != 0)) {
        return false;
      }
    }
  }
  return true;
}

// Runs the child for about `run_for`, SIGKILLs it, and returns what it acknowledged.
std::vector<std::pair<std::string, uint64_t>> run_and_kill(const fs::path& dir, uint64_t first_seed,
                                                           std::chrono::microseconds run_for) {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const std::string seed = std::to_string(first_seed);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::execl(SPINDLE_CATALOG_COMMIT_LOOP, SPINDLE_CATALOG_COMMIT_LOOP, dir.c_str(), seed.c_str(),
            nullptr);
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  const auto deadline = Clock::now() + run_for;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, int(left)) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // the child died on its own: the status check below reports it
    out.append(buf, size_t(n));
  }
  ::kill(pid, SIGKILL);
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child exited by itself (status " << status
      << "); run it by hand: " << SPINDLE_CATALOG_COMMIT_LOOP << " " << dir << " " << first_seed;
  std::vector<std::pair<std::string, uint64_t>> acked;
  std::istringstream lines(out);
  std::string id;
  uint64_t s;
  while (lines >> id >> s) acked.emplace_back(id, s);
  return acked;
}

int64_t sql_count(const fs::path& dir, const char* sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2((dir / "catalog.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  int64_t v = -1;
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

size_t files_in(const fs::path& blobs, bool temp) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(blobs)) {
    if (!e.is_regular_file() || e.path().parent_path() == blobs) continue;
    const bool is_temp = e.path().filename().string().starts_with('.');
    n += is_temp == temp;
  }
  return n;
}

TEST(CatalogDurability, AcknowledgedRevisionsSurviveSigkill) {
  const int kills = env_int("SPINDLE_DURABILITY_KILLS", 50);
  const int rng_seed = env_int("SPINDLE_DURABILITY_SEED", 20240611);
  std::mt19937 rng{uint32_t(rng_seed)};
  // Mostly mid-stream kills; one in five lands during start-up (open, migration, first
  // commit). A commit takes a few fsyncs (~5-20 ms), so 30-250 ms covers several.
  std::uniform_int_distribution<int> startup_us(0, 30000), stream_us(30000, 250000);
  std::uniform_int_distribution<int> which(0, 4);
  auto run_us = [&](std::mt19937& g) { return which(g) == 0 ? startup_us(g) : stream_us(g); };
  const fs::path dir =
      fs::temp_directory_path() / ("spindle_catalog_durability_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RecordProperty("rng_seed", rng_seed);

  std::map<std::string, uint64_t> acked;  // revision id -> seed
  uint64_t orphans_reclaimed = 0, temps_reclaimed = 0;
  for (int round = 0; round < kills; ++round) {
    const auto got =
        run_and_kill(dir, uint64_t(round + 1) * 100000, std::chrono::microseconds(run_us(rng)));
    for (const auto& [id, seed] : got) acked[id] = seed;
    if (!fs::exists(dir / "catalog.db")) continue;  // killed before it created anything

    Catalog cat(dir);
    const CheckReport check = cat.check();
    ASSERT_EQ(check.integrity, "ok") << "round " << round;
    ASSERT_TRUE(check.foreign_keys.empty()) << check.foreign_keys.front();
    ASSERT_TRUE(check.missing_blobs.empty())
        << "round " << round << ": row -> missing blob " << check.missing_blobs.front();
    // This round's acknowledgements, plus a few older ones, read back exactly.
    std::vector<std::pair<std::string, uint64_t>> to_read = got;
    std::uniform_int_distribution<size_t> pick(0, acked.empty() ? 0 : acked.size() - 1);
    for (int k = 0; k < 3 && !acked.empty(); ++k) {
      to_read.push_back(*std::next(acked.begin(), long(pick(rng))));
    }
    for (const auto& [id, seed] : to_read) {
      const auto rev = cat.read_revision(kTenant, {kTenant, kPolicy, id});
      ASSERT_TRUE(same(rev.weights, loop_adapter(seed))) << "round " << round << " " << id;
    }
    // GC with no grace: every blob not referenced by a row is an orphan of a killed commit.
    // Wait out the filesystem's coarse timestamp tick first: GC keeps anything stamped at or
    // after its own start, which a blob written in the same tick as the kill could be.
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    const GcReport gc = cat.gc({.actor = "test", .blob_grace = std::chrono::seconds(0)});
    orphans_reclaimed += gc.blobs.deleted;
    temps_reclaimed += gc.blobs.temp_removed;
    EXPECT_EQ(int64_t(files_in(dir / "blobs", /*temp=*/false)),
              sql_count(dir, "SELECT count(DISTINCT blob) FROM revisions"))
        << "round " << round;
    EXPECT_EQ(files_in(dir / "blobs", /*temp=*/true), 0u) << "round " << round;
  }

  // Finally every acknowledged revision, all of them.
  Catalog cat(dir);
  EXPECT_TRUE(cat.check().ok());
  for (const auto& [id, seed] : acked) {
    EXPECT_TRUE(
        same(cat.read_revision(kTenant, {kTenant, kPolicy, id}).weights, loop_adapter(seed)))
        << id;
  }
  EXPECT_GT(acked.size(), size_t(kills)) << "the child barely committed anything";
  std::printf(
      "durability: %d kills, %zu acknowledged revisions verified, %llu orphan blobs and "
      "%llu temp files reclaimed by GC\n",
      kills, acked.size(), (unsigned long long)orphans_reclaimed,
      (unsigned long long)temps_reclaimed);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spindle::catalog
