// Corruption (issue 16), against a real spindled:
//  - a flipped byte in a revision's blob is caught by its SHA-256 on load: sampling from it
//    answers data_loss naming the blob, resuming from it names the revision too, the daemon
//    keeps serving every other revision, and `spindle catalog check` names the revision and
//    exits non-zero;
//  - catalog.db-wal truncated mid-frame after a SIGKILL: SQLite's WAL recovery keeps exactly the
//    transactions whose commit frame lies wholly before the cut (each frame carries a checksum
//    chained over the frames before it, and recovery stops at the first frame that does not
//    verify), so the revisions acknowledged before the cut are all there, the later ones are all
//    gone, and @latest names the last survivor: a consistent prefix, never a mix;
//  - a page of catalog.db damaged where no WAL frame covers it: the daemon refuses to start,
//    naming catalog.db and what quick_check found; `spindle catalog check` reports it;
//  - a torn page in catalog.db whose current version is still in the WAL (a checkpoint cut
//    short): SQLite reads the WAL's copy, the daemon starts, and the next checkpoint repairs
//    the file.

#include <sqlite3.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>

#include "daemon.h"
#include "spindle/catalog/address.h"
#include "spindle/catalog/catalog.h"

namespace spindle::testing {
namespace {

using namespace protocol;
using json = nlohmann::json;

const std::vector<int32_t> kSeq = {1, 403, 407, 261, 378, 285, 262, 281, 300};

CreateTrainingRequest create(const std::string& policy) { return training_request(policy, 9); }
void train_step(RawClient& client, const std::string& session) {
  testing::train_step(client, session, kSeq, 1e-2f);
}
Reply sample(RawClient& client, const std::string& address) {
  return sample_greedy(client, address, {1, 403}, 4);
}

catalog::Resolved resolve(const fs::path& data_dir, const std::string& address) {
  catalog::Catalog cat(data_dir);
  const catalog::Address a = catalog::parse_address(address);
  return cat.get(a.tenant, a);
}

// XORs one byte in the middle of a file (same size: only a checksum can tell).
void flip_byte(const fs::path& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << file;
  f.seekg(0, std::ios::end);
  const std::streamoff at = f.tellg() / 2;
  f.seekg(at);
  const char c = char(f.get());
  f.seekp(at);
  f.put(char(c ^ 0x10));
}

void overwrite(const fs::path& file, uint64_t offset, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << file;
  f.seekp(std::streamoff(offset));
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

uint32_t be32(const std::string& b, size_t at) {
  return uint32_t(uint8_t(b[at])) << 24 | uint32_t(uint8_t(b[at + 1])) << 16 |
         uint32_t(uint8_t(b[at + 2])) << 8 | uint32_t(uint8_t(b[at + 3]));
}

// One SQL query's first column (rows joined by "; ") on a database file, read-only.
std::string sql_text(const fs::path& db_file, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
      while (sqlite3_step(st) == SQLITE_ROW) {
        const auto* t = sqlite3_column_text(st, 0);
        out += (out.empty() ? "" : "; ") + std::string(t ? reinterpret_cast<const char*>(t) : "");
      }
      sqlite3_finalize(st);
    } else {
      out = std::string("error: ") + sqlite3_errmsg(db);
    }
  }
  sqlite3_close(db);
  return out;
}

// The WAL's frames: page number and whether the frame commits a transaction.
struct WalFrame {
  uint32_t page = 0;
  bool commit = false;
  uint64_t end = 0;  // file offset just past the frame
};
struct Wal {
  uint32_t page_size = 0;
  std::vector<WalFrame> frames;
  uint64_t frame_bytes() const { return 24 + uint64_t(page_size); }
};
Wal read_wal(const fs::path& file) {
  const std::string b = read_text(file);
  Wal w;
  if (b.size() < 32) return w;
  w.page_size = be32(b, 8);
  for (uint64_t at = 32; at + w.frame_bytes() <= b.size(); at += w.frame_bytes()) {
    w.frames.push_back({be32(b, size_t(at)), be32(b, size_t(at) + 4) != 0, at + w.frame_bytes()});
  }
  return w;
}

RunResult catalog_check(const fs::path& data_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"catalog", "--data-dir", data_dir.string(), "check"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_spindle(args);
}

// The daemon's startup failure (its stderr), or "" when it started.
std::string start_failure(const fs::path& data_dir) {
  try {
    Daemon daemon(data_dir, {});
    daemon.terminate();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

TEST(Corruption, FlippedBlobByteIsDataLossAndCheckNamesTheRevision) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("corrupt_blob");
  SaveReply a, b, c;
  {
    Daemon daemon(dir, {});
    RawClient client(daemon.ipc(), daemon.token());
    const auto s = client.ok<TrainingSessionReply>(Op::create_training, create("flip"));
    train_step(client, s.session_id);
    a = client.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "a", ""});
    train_step(client, s.session_id);
    b = client.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "b", ""});
    train_step(client, s.session_id);
    c = client.ok<SaveReply>(Op::save_state, SaveRequest{s.session_id, "c", ""});
    ASSERT_EQ(daemon.terminate(), 0);
  }
  const catalog::Resolved ra = resolve(dir, a.address), rc = resolve(dir, c.address);
  ASSERT_TRUE(rc.revision.state_blob.has_value());
  flip_byte(dir / "blobs" / ra.revision.blob.substr(0, 2) / ra.revision.blob);
  flip_byte(dir / "blobs" / rc.revision.state_blob->substr(0, 2) / *rc.revision.state_blob);

  {
    Daemon daemon(dir, {});  // a fresh host cache: every adapter is read from its blob
    RawClient client(daemon.ipc(), daemon.token());
    for (int attempt = 0; attempt < 2; ++attempt) {  // a failed load is not remembered as good
      const Reply r = sample(client, a.address);
      ASSERT_FALSE(r.ok) << "sampled from a corrupt blob";
      if (attempt == 0) std::printf("  sample: %s: %s\n", r.error.code.c_str(), r.error.message.c_str());
      EXPECT_EQ(r.error.code, errc::data_loss) << r.error.message;
      EXPECT_NE(r.error.message.find(ra.revision.blob), std::string::npos) << r.error.message;
      EXPECT_NE(r.error.message.find("corrupt"), std::string::npos) << r.error.message;
    }
    // The others still serve.
    for (const SaveReply& ok : {b, c}) {
      const Reply r = sample(client, ok.address);
      EXPECT_TRUE(r.ok) << ok.address << ": " << r.error.code << " " << r.error.message;
    }
    // Resuming reads through the catalog, which names the revision as well as the blob.
    {
      const Reply r = client.call(Op::create_training_from_state,
                                  CreateTrainingFromStateRequest{a.address, false});
      ASSERT_FALSE(r.ok);
      std::printf("  create_training_from_state: %s: %s\n", r.error.code.c_str(),
                  r.error.message.c_str());
      EXPECT_EQ(r.error.code, errc::data_loss) << r.error.message;
      EXPECT_NE(r.error.message.find(a.revision_id), std::string::npos) << r.error.message;
      EXPECT_NE(r.error.message.find(ra.revision.blob), std::string::npos) << r.error.message;
    }
    {
      const Reply r = client.call(Op::create_training_from_state,
                                  CreateTrainingFromStateRequest{c.address, true});
      ASSERT_FALSE(r.ok);
      EXPECT_EQ(r.error.code, errc::data_loss) << r.error.message;
      EXPECT_NE(r.error.message.find("optimizer state of revision"), std::string::npos)
          << r.error.message;
      EXPECT_NE(r.error.message.find(c.revision_id), std::string::npos) << r.error.message;
    }
    // Weights-only resume from the same revision does not need the damaged state blob.
    const Reply weights_only = client.call(Op::create_training_from_state,
                                           CreateTrainingFromStateRequest{c.address, false});
    EXPECT_TRUE(weights_only.ok) << weights_only.error.message;
    EXPECT_EQ(daemon.terminate(), 0);
  }

  const RunResult check = catalog_check(dir);
  std::printf("  spindle catalog check (exit %d):\n%s%s", check.exit_code, check.out.c_str(),
              check.err.c_str());
  EXPECT_NE(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("corrupt blob " + ra.revision.blob), std::string::npos) << check.out;
  EXPECT_NE(check.out.find(a.address), std::string::npos) << check.out;
  EXPECT_NE(check.out.find(c.address + " (optimizer state)"), std::string::npos) << check.out;
  EXPECT_NE(check.err.find("2 corrupt blobs"), std::string::npos) << check.err;
  const RunResult as_json = catalog_check(dir, {"--json"});
  EXPECT_NE(as_json.exit_code, 0);
  const json j = json::parse(as_json.out);
  EXPECT_FALSE(j.at("ok").get<bool>());
  EXPECT_EQ(j.at("integrity"), "ok");
  ASSERT_EQ(j.at("corrupt_blobs").size(), 2u) << as_json.out;
  // --quick only looks for presence: it cannot see a flipped byte.
  EXPECT_EQ(catalog_check(dir, {"--quick"}).exit_code, 0);
  fs::remove_all(dir);
}

TEST(Corruption, WalTruncatedMidFrameKeepsExactlyTheCommitsBeforeTheCut) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("wal_cut");
  const fs::path wal = dir / "catalog.db-wal";
  constexpr int kSaves = 8;
  std::vector<SaveReply> acked;
  std::vector<uint64_t> wal_after;  // the WAL's size right after each acknowledgement
  {
    Daemon daemon(dir, {});
    RawClient client(daemon.ipc(), daemon.token());
    const auto s = client.ok<TrainingSessionReply>(Op::create_training, create("walcut"));
    for (int i = 0; i < kSaves; ++i) {
      train_step(client, s.session_id);
      acked.push_back(client.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "", ""}));
      wal_after.push_back(fs::file_size(wal));
    }
    daemon.kill_now();  // no checkpoint: every commit is still only in the WAL
  }
  for (int i = 1; i < kSaves; ++i) {
    ASSERT_GT(wal_after[i], wal_after[i - 1]) << "the WAL was checkpointed or restarted";
  }
  const Wal before = read_wal(wal);
  ASSERT_GT(before.page_size, 0u);
  // Cut half-way through the page of the first frame written after acknowledgement k.
  const int k = kSaves / 2 - 1;  // 0-based: revisions 0..k survive
  const uint64_t cut = wal_after[k] + 24 + before.page_size / 2;
  ASSERT_LT(cut, fs::file_size(wal));
  fs::resize_file(wal, cut);
  // What SQLite's design promises: the transactions whose commit frame ends at or before the
  // cut. Revision i's commit frame ends at or before wal_after[i]; revision i+1's frames all
  // come after wal_after[i] (nothing else may checkpoint in between: checked above).
  const Wal after = read_wal(wal);
  uint64_t last_commit_end = 0;
  for (const WalFrame& f : after.frames) {
    if (f.commit) last_commit_end = f.end;
  }
  EXPECT_LE(last_commit_end, cut);
  EXPECT_GE(last_commit_end, wal_after[k]) << "an acknowledged commit before the cut is torn";

  {
    Daemon daemon(dir, {});
    RawClient client(daemon.ipc(), daemon.token());
    for (int i = 0; i < kSaves; ++i) {
      const Reply r = sample(client, acked[i].address);
      if (i <= k) {
        EXPECT_TRUE(r.ok) << "revision " << i << " committed before the cut is lost: "
                          << r.error.code << " " << r.error.message;
      } else {
        EXPECT_FALSE(r.ok) << "revision " << i << " committed after the cut is still served";
        EXPECT_EQ(r.error.code, errc::not_found) << r.error.message;
      }
    }
    const Reply latest = sample(client, "spindle://local/walcut@latest");
    EXPECT_TRUE(latest.ok) << latest.error.message;
    if (latest.ok) {
      EXPECT_EQ(std::get<SampleReply>(latest.body).revision_id, acked[k].revision_id)
          << "@latest is not the last commit before the cut";
    }
    EXPECT_EQ(daemon.terminate(), 0);
  }
  const RunResult check = catalog_check(dir, {"--json"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_EQ(json::parse(check.out).at("revisions"), k + 1) << check.out;
  fs::remove_all(dir);
}

// Saves `n` revisions of policy `name` in a running daemon.
std::vector<SaveReply> save_some(Daemon& daemon, const std::string& name, int n) {
  RawClient client(daemon.ipc(), daemon.token());
  const auto s = client.ok<TrainingSessionReply>(Op::create_training, create(name));
  std::vector<SaveReply> out;
  for (int i = 0; i < n; ++i) {
    train_step(client, s.session_id);
    out.push_back(client.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "", ""}));
  }
  return out;
}

TEST(Corruption, DamagedPageMakesTheDaemonRefuseToStart) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("torn_page");
  const fs::path db = dir / "catalog.db";
  {
    Daemon daemon(dir, {});
    save_some(daemon, "torn", 3);
    ASSERT_EQ(daemon.terminate(), 0);  // a clean stop checkpoints: catalog.db holds it all
  }
  ASSERT_FALSE(fs::exists(dir / "catalog.db-wal") && fs::file_size(dir / "catalog.db-wal") > 0);
  const int64_t page_size = std::stoll(sql_text(db, "PRAGMA page_size"));
  const int64_t root = std::stoll(sql_text(db, "SELECT rootpage FROM sqlite_schema WHERE name = 'revisions'"));
  ASSERT_GT(root, 1);
  // The page's b-tree header and cell pointers overwritten: what a torn or misdirected write
  // leaves with no WAL copy to repair it.
  overwrite(db, uint64_t(root - 1) * uint64_t(page_size), std::string(64, char(0xA5)));

  const std::string failure = start_failure(dir);
  ASSERT_FALSE(failure.empty()) << "spindled started on a damaged catalog.db";
  std::printf("  %s\n", failure.c_str());
  EXPECT_NE(failure.find(db.string()), std::string::npos) << failure;
  EXPECT_NE(failure.find("damaged"), std::string::npos) << failure;
  EXPECT_NE(failure.find("quick_check"), std::string::npos) << failure;

  const RunResult check = catalog_check(dir, {"--json"});
  std::printf("  spindle catalog check --json (exit %d): %s%s", check.exit_code, check.out.c_str(),
              check.err.c_str());
  EXPECT_NE(check.exit_code, 0) << check.out;
  if (!check.out.empty()) {
    const json j = json::parse(check.out);
    EXPECT_FALSE(j.at("ok").get<bool>());
    EXPECT_NE(j.at("integrity"), "ok");
  } else {
    EXPECT_NE(check.err.find("damaged"), std::string::npos) << check.err;  // refused outright
  }
  fs::remove_all(dir);
}

TEST(Corruption, TornPageStillInTheWalIsRepairedByRecovery) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("torn_wal");
  const fs::path db = dir / "catalog.db";
  std::vector<SaveReply> acked;
  {
    Daemon daemon(dir, {});
    acked = save_some(daemon, "first", 2);
    ASSERT_EQ(daemon.terminate(), 0);
  }
  const int64_t page_size = std::stoll(sql_text(db, "PRAGMA page_size"));
  const int64_t root = std::stoll(sql_text(db, "SELECT rootpage FROM sqlite_schema WHERE name = 'revisions'"));
  {
    Daemon daemon(dir, {});
    for (const SaveReply& r : save_some(daemon, "second", 2)) acked.push_back(r);
    daemon.kill_now();
  }
  // The revisions table's root page has a newer copy in the WAL; the file's copy is torn (its
  // second half garbage), as a checkpoint interrupted mid-write would leave it.
  const Wal wal = read_wal(dir / "catalog.db-wal");
  bool in_wal = false;
  for (const WalFrame& f : wal.frames) in_wal = in_wal || int64_t(f.page) == root;
  ASSERT_TRUE(in_wal) << "page " << root << " has no WAL frame";
  overwrite(db, uint64_t(root - 1) * uint64_t(page_size) + uint64_t(page_size) / 2,
            std::string(size_t(page_size) / 2, char(0x5A)));
  {
    Daemon daemon(dir, {});
    RawClient client(daemon.ipc(), daemon.token());
    for (const SaveReply& r : acked) {
      const Reply s = sample(client, r.address);
      EXPECT_TRUE(s.ok) << r.address << ": " << s.error.code << " " << s.error.message;
    }
    EXPECT_EQ(daemon.terminate(), 0);  // its checkpoint writes the WAL's copy over the torn one
  }
  EXPECT_EQ(sql_text(db, "PRAGMA integrity_check"), "ok");
  const RunResult check = catalog_check(dir);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spindle::testing
