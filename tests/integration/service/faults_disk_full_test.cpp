// Disk full during save_weights/save_state (issue 16), in a real spindled whose data directory
// fills up: on a small tmpfs the test mounts (root), and through the LD_PRELOADed ENOSPC shim
// (any user). Each failing save answers resource_exhausted naming the path (a blob in the blob
// store, or catalog.db when SQLite is the one out of room); nothing acknowledged before is lost;
// the daemon keeps serving; the next save after space is freed succeeds; a restart finds exactly
// the acknowledged revisions, each with its checksum, and no partial blob anywhere.

#include <gtest/gtest.h>

#include <functional>

#include "daemon.h"
#include "small_fs.h"
#include "spindle/adapters/sha256.h"
#include "spindle/catalog/address.h"
#include "spindle/catalog/catalog.h"

namespace spindle::testing {
namespace {

using namespace protocol;

// How a test makes the daemon's disk full and frees it again.
struct Disk {
  std::function<void(uint64_t leave)> fill;  // leave: bytes that still fit (about)
  std::function<void()> free_space;
};

const std::vector<int32_t> kSeq = {1, 403, 407, 261, 378, 285, 262, 281, 300};

CreateTrainingRequest create(const std::string& policy) { return training_request(policy, 3); }
void train_step(RawClient& client, const std::string& session) {
  testing::train_step(client, session, kSeq, 1e-2f);
}
Reply sample(RawClient& client, const std::string& address) {
  return sample_greedy(client, address, {1, 403}, 4);
}

// Every file of the blob store is a complete blob (its bytes hash to its name): no temp file
// and no partial blob survived a failed write.
void expect_blob_store_sound(const fs::path& blobs) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(blobs)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (name == ".lock" || name == ".gc-clock") continue;
    EXPECT_TRUE(adapters::is_sha256_hex(name)) << "left behind in the blob store: " << e.path();
    if (!adapters::is_sha256_hex(name)) continue;
    EXPECT_EQ(adapters::sha256_hex(read_text(e.path())), name) << "torn blob " << e.path();
    ++n;
  }
  EXPECT_GT(n, 0u);
}

// The scenario, whatever fills the disk. `data_dir` is where spindled keeps its data.
void run_disk_full(const fs::path& data_dir, Disk disk, const std::function<void()>& started) {
  std::vector<SaveReply> acked;
  {
    Daemon daemon(data_dir, {});
    if (started) started();
    RawClient client(daemon.ipc(), daemon.token());
    const auto s = client.ok<TrainingSessionReply>(Op::create_training, create("full"));
    train_step(client, s.session_id);
    acked.push_back(client.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "a", ""}));
    acked.push_back(client.ok<SaveReply>(Op::save_state, SaveRequest{s.session_id, "b", ""}));
    const int64_t blob_bytes = acked.front().bytes;
    ASSERT_GT(blob_bytes, 8192) << "the revision is too small to fail half-way";

    // 1. The blob store is out of room: new weights do not fit (about half of them would).
    train_step(client, s.session_id);
    disk.fill(uint64_t(blob_bytes / 2));
    for (Op op : {Op::save_weights, Op::save_state}) {
      const Reply r = client.call(op, SaveRequest{s.session_id, "fails", ""});
      ASSERT_FALSE(r.ok) << op_name(op) << " succeeded on a full disk";
      std::printf("  %s on a full blob store: %s: %s\n", op_name(op), r.error.code.c_str(),
                  r.error.message.c_str());
      EXPECT_EQ(r.error.code, errc::resource_exhausted) << r.error.message;
      EXPECT_NE(r.error.message.find((data_dir / "blobs").string()), std::string::npos)
          << "the message does not name the blob's path: " << r.error.message;
      EXPECT_NE(r.error.message.find("No space left on device"), std::string::npos)
          << r.error.message;
    }
    // The daemon keeps serving: the session trains, acknowledged revisions sample.
    train_step(client, s.session_id);
    for (const auto& a : acked) {
      const Reply r = sample(client, a.address);
      EXPECT_TRUE(r.ok) << a.address << ": " << r.error.code << " " << r.error.message;
    }
    EXPECT_GT(client.ok<StatusReply>(Op::status, Empty{}).requests_served, 0u);

    // 2. Space is back: the next save succeeds.
    disk.free_space();
    acked.push_back(client.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "c", ""}));

    // 3. SQLite is the one out of room: the same weights again (their blob is stored and
    //    intact, so nothing is written to the blob store) commit a new revision on top of
    //    the head, and the database cannot grow its WAL.
    disk.fill(0);
    {
      const Reply r = client.call(Op::save_weights, SaveRequest{s.session_id, "fails", ""});
      ASSERT_FALSE(r.ok) << "a commit succeeded on a full disk";
      std::printf("  save_weights with SQLite out of room: %s: %s\n", r.error.code.c_str(),
                  r.error.message.c_str());
      EXPECT_EQ(r.error.code, errc::resource_exhausted) << r.error.message;
      EXPECT_NE(r.error.message.find((data_dir / "catalog.db").string()), std::string::npos)
          << "the message does not name catalog.db: " << r.error.message;
    }
    const Reply still = sample(client, acked.back().address);
    EXPECT_TRUE(still.ok) << still.error.message;
    disk.free_space();
    acked.push_back(client.ok<SaveReply>(Op::save_state, SaveRequest{s.session_id, "d", ""}));
    const Reply last = sample(client, acked.back().address);
    EXPECT_TRUE(last.ok) << last.error.message;
    EXPECT_EQ(daemon.terminate(), 0);
  }
  // After a restart: exactly the acknowledged revisions, each reading back with its checksum,
  // the head on the last one, and nothing half-written in the blob store.
  {
    Daemon daemon(data_dir, {});
    RawClient client(daemon.ipc(), daemon.token());
    for (const auto& a : acked) {
      const Reply r = sample(client, a.address);
      EXPECT_TRUE(r.ok) << a.address << ": " << r.error.message;
    }
    EXPECT_EQ(daemon.terminate(), 0);
  }
  catalog::Catalog cat(data_dir);
  for (const auto& a : acked) {
    const catalog::Address addr = catalog::parse_address(a.address);
    EXPECT_NO_THROW(cat.read_revision(addr.tenant, addr)) << a.address;
  }
  const catalog::Address head = catalog::parse_address(acked.back().address);
  EXPECT_EQ(cat.get_policy(head.tenant, head.policy).head.value_or(""), acked.back().revision_id);
  const catalog::CheckReport check = cat.check();
  EXPECT_TRUE(check.ok()) << check.integrity;
  EXPECT_EQ(check.revisions, int64_t(acked.size())) << "a failed save left a revision row";
  expect_blob_store_sound(data_dir / "blobs");
}

TEST(DiskFull, SmallTmpfsDataDir) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  std::string why;
  auto small = SmallFs::mount(uint64_t(16) << 20, "diskfull", &why);
  if (!small) {
    GTEST_SKIP() << "cannot mount a small filesystem (" << why
                 << "); DiskFull.PreloadShim covers disk full without mounting";
  }
  const fs::path data_dir = small->dir() / "data";
  run_disk_full(data_dir,
                {.fill = [&](uint64_t leave) { small->fill(leave); },
                 .free_space = [&] { small->free_space(); }},
                nullptr);
}

TEST(DiskFull, PreloadShim) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path data_dir = fresh_dir("diskfull_shim");
  std::string why;
  auto shim = EnospcShim::attach(data_dir, &why);
  if (!shim) GTEST_SKIP() << why;
  run_disk_full(data_dir,
                {.fill = [&](uint64_t leave) { shim->fill(leave); },
                 .free_space = [&] { shim->free_space(); }},
                [&] { shim->stop_preloading(); });
  fs::remove_all(data_dir);
}

}  // namespace
}  // namespace spindle::testing
