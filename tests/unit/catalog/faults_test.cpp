// Faults below the daemon (issue 16): a full disk under the blob store and under SQLite is
// `resource` naming the path and leaves nothing half-written; a blob failing its checksum is
// data_loss naming the revision and is reported by check(); re-committing the same bytes
// repairs it; a damaged catalog.db is refused at open; and a WAL cut at any byte keeps exactly
// the commits whose commit frame ends before the cut.

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "../../integration/service/small_fs.h"
#include "catalog_fixture.h"
#include "spindle/adapters/sha256.h"
#include "spindle/core/file_io.h"

namespace spindle::catalog::testing {
namespace {

namespace fs = std::filesystem;
using spindle::testing::SmallFs;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t files_named_like(const fs::path& dir, const std::string& part) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().find(part) != std::string::npos) ++n;
  }
  return n;
}

TEST(ErrorCodes, ErrnoMapsToOneCodePerKind) {
  EXPECT_EQ(error_code_for_errno(ENOSPC), ErrorCode::resource);
  EXPECT_EQ(error_code_for_errno(EDQUOT), ErrorCode::resource);
  EXPECT_EQ(error_code_for_errno(ENOENT), ErrorCode::not_found);
  EXPECT_EQ(error_code_for_errno(EIO), ErrorCode::io);
  EXPECT_STREQ(error_code_name(ErrorCode::data_loss), "data_loss");
}

// ---- disk full ------------------------------------------------------------------------------

class DiskFull : public CatalogTest {
 protected:
  void SetUp() override {
    std::string why;
    small_ = SmallFs::mount(uint64_t(8) << 20, "unit", &why);
    if (!small_) GTEST_SKIP() << "cannot mount a small filesystem: " << why;
    dir_ = small_->dir() / "data";
    cat_ = open();
    cat_->register_base({.id = "tiny", .arch = "qwen3", .path = "", .checksum = "c0ffee"}, "test");
  }
  void TearDown() override {
    cat_.reset();
    small_.reset();  // unmounts; nothing to remove
  }
  std::optional<SmallFs> small_;
};

TEST_F(DiskFull, WriteFileAtomicKeepsTheOldFileAndLeavesNoTemp) {
  const fs::path file = small_->dir() / "config.json";
  write_file_atomic(file, std::string_view("old"));
  small_->fill();
  const auto err = catch_error([&] { write_file_atomic(file, std::string(1 << 20, 'x')); });
  EXPECT_EQ(err.code, ErrorCode::resource) << err.message;
  EXPECT_NE(err.message.find(file.string()), std::string::npos) << err.message;
  EXPECT_NE(err.message.find("No space left on device"), std::string::npos) << err.message;
  EXPECT_EQ(slurp(file), "old");
  EXPECT_EQ(files_named_like(small_->dir(), ".tmp-"), 0u);
}

TEST_F(DiskFull, BlobPutIsResourceAndLeavesNoPartialBlob) {
  const adapters::BlobStore& store = cat_->blobs();
  const std::string kept = store.put("acknowledged before the disk filled");
  small_->fill();
  const std::string big(256 << 10, 'b');
  const auto err = catch_error([&] { store.put(big); });
  EXPECT_EQ(err.code, ErrorCode::resource) << err.message;
  EXPECT_NE(err.message.find(store.path_of(adapters::sha256_hex(big)).string()), std::string::npos)
      << err.message;
  EXPECT_FALSE(store.exists(adapters::sha256_hex(big)));
  EXPECT_EQ(files_named_like(store.root(), ".tmp-"), 0u);
  EXPECT_EQ(store.get(kept), "acknowledged before the disk filled");
  // The streamed put: the same code, naming the store; no temp file left in the root; content already
  // stored is still a success on the full disk (nothing new is needed).
  const adapters::BlobProducer big_stream = [&](const adapters::BlobWrite& write) {
    write(big.data(), big.size() / 2);
    write(big.data() + big.size() / 2, big.size() - big.size() / 2);
  };
  const auto stream_err = catch_error([&] { store.put_stream(big_stream); });
  EXPECT_EQ(stream_err.code, ErrorCode::resource) << stream_err.message;
  EXPECT_NE(stream_err.message.find(store.root().string()), std::string::npos)
      << stream_err.message;
  EXPECT_FALSE(store.exists(adapters::sha256_hex(big)));
  EXPECT_EQ(files_named_like(store.root(), ".tmp-"), 0u);
  const std::string kept_text = "acknowledged before the disk filled";
  const adapters::BlobPut again = store.put_stream(
      [&](const adapters::BlobWrite& write) { write(kept_text.data(), kept_text.size()); });
  EXPECT_EQ(again.id, kept);
  EXPECT_EQ(again.bytes, kept_text.size());
  EXPECT_EQ(files_named_like(store.root(), ".tmp-"), 0u);
  small_->free_space();
  EXPECT_EQ(store.get(store.put(big)), big);
}

TEST_F(DiskFull, CommitFailsCleanlyInTheBlobStoreAndInSqlite) {
  cat_->create_policy("acme", spec("p"), "test");
  const Revision first = commit("acme", "p", 1);

  // The blob store runs out: nothing is committed.
  small_->fill();
  auto err = catch_error([&] { commit("acme", "p", 2); });
  EXPECT_EQ(err.code, ErrorCode::resource) << err.message;
  EXPECT_NE(err.message.find((dir_ / "blobs").string()), std::string::npos) << err.message;
  EXPECT_EQ(cat_->get_policy("acme", "p").head, first.id);

  // SQLite runs out: the revision file is already stored (put() finds it intact and writes
  // nothing), so the first write to fail is the WAL's.
  small_->free_space();
  const engine::LoraWeights w = adapter(3);
  cat_->blobs().put(adapters::encode_revision(
      w, adapters::revision_meta_for(w, {.base_model_id = "tiny", .base_checksum = "c0ffee"})));
  small_->fill();
  err = catch_error([&] { cat_->commit_revision("acme", "p", w, {.actor = "test"}); });
  EXPECT_EQ(err.code, ErrorCode::resource) << err.message;
  EXPECT_NE(err.message.find((dir_ / "catalog.db").string()), std::string::npos) << err.message;
  EXPECT_NE(err.message.find("no space left"), std::string::npos) << err.message;
  EXPECT_EQ(cat_->get_policy("acme", "p").head, first.id);  // the same connection still works
  EXPECT_TRUE(same_weights(cat_->read_revision("acme", addr("acme", "p", first.id)).weights,
                           adapter(1)));

  // Space again: the next commit succeeds, and a fresh connection sees exactly the two.
  small_->free_space();
  const Revision second = cat_->commit_revision("acme", "p", w, {.actor = "test"});
  cat_ = open();
  EXPECT_EQ(cat_->get_policy("acme", "p").head, second.id);
  const CheckReport check = cat_->check();
  EXPECT_TRUE(check.ok()) << check.integrity;
  EXPECT_EQ(check.revisions, 2);
}

// ---- corruption -------------------------------------------------------------------------------

class Corruption : public CatalogTest {
 protected:
  void flip(const std::string& blob) {
    const fs::path p = cat_->blobs().path_of(blob);
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(fs::file_size(p) / 2));
    const char c = char(f.get());
    f.seekp(std::streamoff(fs::file_size(p) / 2));
    f.put(char(c ^ 1));
  }
};

TEST_F(Corruption, ReadAndCheckNameTheRevisionAndRecommitRepairs) {
  cat_->create_policy("acme", spec("p"), "test");
  const Revision good = commit("acme", "p", 1);
  const Revision bad = commit("acme", "p", 2);
  flip(bad.blob);

  const auto err = catch_error([&] { cat_->read_revision("acme", addr("acme", "p", bad.id)); });
  EXPECT_EQ(err.code, ErrorCode::data_loss);
  EXPECT_NE(err.message.find("revision spindle://acme/p@" + bad.id), std::string::npos)
      << err.message;
  EXPECT_NE(err.message.find(bad.blob), std::string::npos) << err.message;
  EXPECT_NO_THROW(cat_->read_revision("acme", addr("acme", "p", good.id)));

  CheckReport c = cat_->check();
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.blobs_verified, 2);
  ASSERT_EQ(c.corrupt_blobs.size(), 1u);
  EXPECT_EQ(c.corrupt_blobs[0].blob, bad.blob);
  EXPECT_EQ(c.corrupt_blobs[0].path, cat_->blobs().path_of(bad.blob).string());
  EXPECT_EQ(c.corrupt_blobs[0].revisions,
            std::vector<std::string>{"spindle://acme/p@" + bad.id});
  EXPECT_TRUE(cat_->check({.verify_blobs = false}).ok());  // presence only

  // The same bytes committed again (here: put) replace the damaged copy.
  const engine::LoraWeights w = adapter(2);
  cat_->blobs().put(adapters::encode_revision(
      w, adapters::revision_meta_for(w, {.base_model_id = "tiny", .base_checksum = "c0ffee"})));
  EXPECT_TRUE(cat_->check().ok());
  EXPECT_TRUE(same_weights(cat_->read_revision("acme", addr("acme", "p", bad.id)).weights, w));
}

TEST_F(Corruption, MissingBlobOfALiveRevisionIsDataLoss) {
  cat_->create_policy("acme", spec("p"), "test");
  const Revision r = commit("acme", "p", 1);
  fs::remove(cat_->blobs().path_of(r.blob));
  const auto err = catch_error([&] { cat_->read_revision("acme", addr("acme", "p", r.id)); });
  EXPECT_EQ(err.code, ErrorCode::data_loss) << err.message;
  EXPECT_NE(err.message.find("revision spindle://acme/p@" + r.id), std::string::npos)
      << err.message;
  EXPECT_NE(err.message.find("missing"), std::string::npos) << err.message;
  EXPECT_EQ(cat_->check().missing_blobs, std::vector<std::string>{r.blob});
}

// Overwrites the b-tree header of table `table`'s root page with garbage.
void damage_root_page(const fs::path& dir, const std::string& table) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "catalog.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  const std::string sql = "SELECT rootpage FROM sqlite_schema WHERE name = '" + table + "'";
  ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  const int64_t root = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  const int64_t page_size = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  std::fstream f(dir / "catalog.db", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff((root - 1) * page_size));
  const std::string junk(48, char(0xA5));
  f.write(junk.data(), std::streamsize(junk.size()));
}

TEST_F(Corruption, DamagedPageIsRefusedAtOpenAndReportedByCheck) {
  cat_->create_policy("acme", spec("p"), "test");
  commit("acme", "p", 1);
  cat_.reset();
  damage_root_page(dir_, "revisions");

  const auto err = catch_error([&] { open(); });
  EXPECT_EQ(err.code, ErrorCode::data_loss);
  EXPECT_NE(err.message.find((dir_ / "catalog.db").string()), std::string::npos) << err.message;
  EXPECT_NE(err.message.find("quick_check"), std::string::npos) << err.message;

  // Without the check at open (as `spindle catalog check` opens it): the full report, and a
  // query that reaches the page is data_loss naming the file, never wrong rows.
  CatalogOptions o;
  o.quick_check = false;
  Catalog raw(dir_, o);
  EXPECT_NE(raw.check().integrity, "ok");
  const auto q = catch_error([&] { raw.get("acme", addr("acme", "p")); });
  EXPECT_EQ(q.code, ErrorCode::data_loss) << q.message;
  EXPECT_NE(q.message.find("catalog.db is damaged"), std::string::npos) << q.message;
}

// SQLite's WAL promise, at every cut: a child commits revisions and is SIGKILLed (no
// checkpoint); for each frame of the WAL, a copy truncated half-way through that frame opens
// with exactly the revisions whose commit frame ended at or before the cut, @latest on the
// last of them, and integrity "ok".
TEST_F(Corruption, WalCutAnywhereKeepsExactlyTheCommitsBeforeIt) {
  cat_->create_policy("acme", spec("p"), "test");
  cat_.reset();
  constexpr int kCommits = 6;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    auto cat = open();
    for (int i = 0; i < kCommits; ++i) {
      clock_ms_ += 1000;
      const Revision r = cat->commit_revision("acme", "p", adapter(100 + i), {.actor = "child"});
      const std::string line =
          r.id + " " + std::to_string(fs::file_size(dir_ / "catalog.db-wal")) + "\n";
      if (::write(pipe_fds[1], line.data(), line.size()) != ssize_t(line.size())) ::_exit(2);
    }
    ::raise(SIGKILL);
  }
  ::close(pipe_fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  std::vector<std::pair<std::string, uint64_t>> acked;  // (revision, WAL size after commit)
  std::istringstream lines(out);
  for (std::string id; lines >> id;) {
    uint64_t size = 0;
    lines >> size;
    acked.push_back({id, size});
  }
  ASSERT_EQ(acked.size(), size_t(kCommits));

  const std::string wal = slurp(dir_ / "catalog.db-wal");
  const uint32_t page_size = uint32_t(uint8_t(wal[8])) << 24 | uint32_t(uint8_t(wal[9])) << 16 |
                             uint32_t(uint8_t(wal[10])) << 8 | uint32_t(uint8_t(wal[11]));
  const uint64_t frame = 24 + page_size;
  int cuts = 0;
  for (uint64_t start = 32; start + frame <= wal.size(); start += frame) {
    const uint64_t cut = start + 24 + page_size / 2;  // mid-frame: the page half written
    const fs::path copy = fresh_dir("walcut");
    fs::create_directories(copy);
    fs::copy(dir_ / "catalog.db", copy / "catalog.db");
    fs::copy(dir_ / "blobs", copy / "blobs", fs::copy_options::recursive);
    std::ofstream(copy / "catalog.db-wal", std::ios::binary).write(wal.data(), std::streamsize(cut));
    {
      CatalogOptions o;
      o.clock_ms = [this] { return clock_ms_; };
      Catalog cat(copy, o);
      std::optional<std::string> last;
      for (const auto& [id, end] : acked) {
        const auto got = catch_error([&] { cat.get("acme", addr("acme", "p", id)); });
        if (end <= cut) {
          EXPECT_FALSE(got.code) << "cut " << cut << ": revision committed by " << end
                                 << " lost: " << got.message;
          last = id;
        } else {
          EXPECT_EQ(got.code, ErrorCode::not_found) << "cut " << cut << ": revision committed at "
                                                    << end << " survived";
        }
      }
      // Before the first commit the policy has no head.
      EXPECT_EQ(cat.get_policy("acme", "p").head, last) << "cut " << cut;
      EXPECT_EQ(cat.check().integrity, "ok") << "cut " << cut;
    }
    fs::remove_all(copy);
    ++cuts;
  }
  EXPECT_GT(cuts, kCommits);
  std::printf("  WAL of %zu bytes (%u-byte pages): %d mid-frame cuts, each a consistent prefix\n",
              wal.size(), page_size, cuts);
}

}  // namespace
}  // namespace spindle::catalog::testing
