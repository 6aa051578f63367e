// Blob store: durable put, verified get, dedup, corruption detection, GC and its protocol.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "catalog_fixture.h"
#include "spindle/adapters/blob_store.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/adapters/sha256.h"

namespace spindle::adapters {
namespace {

namespace fs = std::filesystem;
using catalog::testing::catch_error;
using catalog::testing::fresh_dir;

size_t count_files(const fs::path& root) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file() && !e.path().filename().string().starts_with('.')) ++n;
  }
  return n;
}

void age(const fs::path& p, int seconds) {
  const auto t = fs::last_write_time(p) - std::chrono::seconds(seconds);
  fs::last_write_time(p, t);
}

class BlobStoreTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_ = fresh_dir("blobs");
  BlobStore store_{root_};
};

TEST_F(BlobStoreTest, PutGetRoundTripUnderFanout) {
  const std::string id = store_.put("hello blob");
  EXPECT_EQ(id, sha256_hex("hello blob"));
  EXPECT_EQ(store_.path_of(id), root_ / id.substr(0, 2) / id);
  EXPECT_TRUE(fs::is_regular_file(store_.path_of(id)));
  EXPECT_EQ(store_.get(id), "hello blob");
  EXPECT_TRUE(store_.exists(id));
  EXPECT_EQ(store_.size_of(id), 10u);
}

TEST_F(BlobStoreTest, IdenticalContentIsStoredOnce) {
  const std::string a = store_.put("same bytes");
  age(store_.path_of(a), 7200);
  const auto old_time = fs::last_write_time(store_.path_of(a));
  const std::string b = store_.put("same bytes");
  EXPECT_EQ(a, b);
  EXPECT_EQ(count_files(root_), 1u);
  // Re-putting refreshes the mtime, so a GC running now treats it as just written.
  EXPECT_GT(fs::last_write_time(store_.path_of(a)), old_time);
  store_.put("other bytes");
  EXPECT_EQ(count_files(root_), 2u);
}

TEST_F(BlobStoreTest, CorruptBlobIsDetectedAndNamed) {
  const std::string id = store_.put(std::string(4096, 'x'));
  {
    std::fstream f(store_.path_of(id), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('y');  // one flipped byte, same size
  }
  const auto err = catch_error([&] { store_.get(id); });
  EXPECT_EQ(err.code, ErrorCode::data_loss);
  EXPECT_NE(err.message.find(id), std::string::npos) << err.message;
  EXPECT_NE(err.message.find("corrupt"), std::string::npos) << err.message;
}

// get_revision reads a revision blob straight into its tensors: the same adapter as decoding
// get()'s bytes, for f32 and bf16 blobs and for a routed-experts adapter; a flipped byte in a
// tensor or in the header, or a truncated blob, is data_loss naming the blob, as get() says; a
// blob that is intact but no revision keeps the decoder's own error.
TEST_F(BlobStoreTest, GetRevisionDecodesInPlaceAndVerifiesTheDigest) {
  const engine::ModelConfig moe = spindle::testing::tiny_config(engine::Arch::qwen3_moe);
  // dim 4096 at rank 64: up's A and down's B are 1 MiB, read in place between small tensors.
  engine::ModelConfig wide = catalog::testing::tiny();
  wide.dim = 4096;
  const engine::LoraTarget targets[] = {engine::LoraTarget::q, engine::LoraTarget::up,
                                        engine::LoraTarget::down};
  struct Case {
    engine::ModelConfig config;
    DType dtype;
    int64_t rank;
  };
  for (const Case& k : {Case{catalog::testing::tiny(), DType::f32, 4},
                        Case{catalog::testing::tiny(), DType::bf16, 4}, Case{moe, DType::f32, 4},
                        Case{wide, DType::f32, 64}, Case{wide, DType::bf16, 64}}) {
    const engine::ModelConfig& config = k.config;
    const DType dtype = k.dtype;
    SCOPED_TRACE(std::string(engine::arch_name(config.arch)) + " dim " +
                 std::to_string(config.dim) + " " + std::string(dtype_name(dtype)));
    const engine::LoraWeights w =
        engine::LoraWeights::random(config, k.rank, 8.0f, targets, 9, 0.5f, 0.5f);
    const std::string bytes =
        encode_revision(w, revision_meta_for(w, {.base_model_id = "b", .base_checksum = "c",
                                                 .dtype = dtype}));
    const std::string id = store_.put(bytes);
    const DecodedRevision want = decode_revision(store_.get(id), "want");
    const DecodedRevision got = store_.get_revision(id, "got");
    EXPECT_EQ(got.meta.rank, want.meta.rank);
    EXPECT_EQ(got.meta.dtype, dtype);
    EXPECT_EQ(spindle::testing::max_abs_diff(got.weights, want.weights), 0.0f);
    EXPECT_EQ(got.weights.has_experts(), config.moe.n_experts > 0);

    for (const size_t at : {size_t(20), bytes.size() - 3}) {  // header, then tensor data
      store_.put(bytes);  // an intact copy again
      const fs::path path = store_.path_of(id);
      fs::permissions(path, fs::perms::owner_write, fs::perm_options::add);
      {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(std::streamoff(at));
        f.put(char(bytes[at] ^ 0x5a));
      }
      const auto err = catch_error([&] { store_.get_revision(id, "rev"); });
      EXPECT_EQ(err.code, ErrorCode::data_loss) << "byte " << at << ": " << err.message;
      EXPECT_NE(err.message.find(id), std::string::npos) << err.message;
      EXPECT_NE(err.message.find("corrupt"), std::string::npos) << err.message;
      fs::remove(path);
    }
    store_.put(bytes);
    fs::permissions(store_.path_of(id), fs::perms::owner_write, fs::perm_options::add);
    fs::resize_file(store_.path_of(id), bytes.size() / 2);
    EXPECT_EQ(catch_error([&] { store_.get_revision(id, "rev"); }).code, ErrorCode::data_loss);
    fs::remove(store_.path_of(id));
  }
  const std::string not_revision = store_.put(std::string(64, 'z'));
  const auto err = catch_error([&] { store_.get_revision(not_revision, "plain bytes"); });
  EXPECT_EQ(err.code, ErrorCode::format) << err.message;
  EXPECT_NE(err.message.find("plain bytes"), std::string::npos) << err.message;
  EXPECT_EQ(catch_error([&] { store_.get_revision(sha256_hex("never"), "x"); }).code,
            ErrorCode::not_found);
}

// A blob of many small tensors, larger than read_revision_file's staging pool (3 runs of
// 4 MiB hashed beside the reads): the reader waits for buffers the hasher returns, and the
// digest is still the file's SHA-256 over every byte in order.
TEST(RevisionFile, ManyStagedRunsHashInOrder) {
  engine::ModelConfig wide = catalog::testing::tiny();
  wide.dim = 4096;
  wide.n_layers = 40;
  const engine::LoraTarget targets[] = {engine::LoraTarget::q, engine::LoraTarget::up,
                                        engine::LoraTarget::down};
  const engine::LoraWeights w =
      engine::LoraWeights::random(wide, 16, 8.0f, targets, 5, 0.5f, 0.5f);
  const std::string bytes = encode_revision(
      w, revision_meta_for(w, {.base_model_id = "b", .base_checksum = "c", .dtype = DType::bf16}));
  ASSERT_GT(bytes.size(), size_t(13) << 20) << "not past the staging pool";
  const fs::path dir = fresh_dir("revfile-runs");
  fs::create_directories(dir);
  const fs::path path = dir / "blob";
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }
  Sha256 digest;
  const DecodedRevision got = read_revision_file(FileReader(path), "blob", &digest);
  EXPECT_EQ(digest.finish_hex(), sha256_hex(bytes));
  const DecodedRevision want = decode_revision(bytes, "blob");
  EXPECT_EQ(spindle::testing::max_abs_diff(got.weights, want.weights), 0.0f);
}

// read_revision_file against decode_revision on the same bytes, under a fixed-seed stream of
// mutations (bit flips in the header and the data, truncations, appended bytes) of valid
// blobs with small and 1 MiB tensors: both accept with bit-identical weights or both refuse
// with spindle::Error (the file reader never crashes or returns something else), and the
// digest it takes is the file's SHA-256 whenever it accepts.
TEST(RevisionFile, AgreesWithDecodeRevisionOnMutatedBlobs) {
  engine::ModelConfig wide = catalog::testing::tiny();
  wide.dim = 4096;
  const engine::LoraTarget targets[] = {engine::LoraTarget::q, engine::LoraTarget::up};
  std::vector<std::string> seeds;
  for (const auto& [config, rank, dtype] :
       {std::tuple{catalog::testing::tiny(), int64_t{4}, DType::f32},
        std::tuple{catalog::testing::tiny(), int64_t{2}, DType::bf16},
        std::tuple{wide, int64_t{64}, DType::f32}}) {
    const engine::LoraWeights w = engine::LoraWeights::random(config, rank, 8.0f, targets, 3,
                                                              0.5f, 0.5f);
    seeds.push_back(encode_revision(
        w, revision_meta_for(w, {.base_model_id = "b", .base_checksum = "c", .dtype = dtype})));
  }
  const fs::path dir = fresh_dir("revfile");
  fs::create_directories(dir);
  const fs::path path = dir / "blob";
  std::mt19937_64 rng(17);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 600; ++i) {
    std::string bytes = seeds[size_t(i) % seeds.size()];
    const uint64_t header_end = 8 + uint64_t(uint8_t(bytes[0])) + (uint64_t(uint8_t(bytes[1])) << 8);
    switch (i % 4) {
      case 0: bytes[size_t(rng() % std::min<uint64_t>(header_end, bytes.size()))] ^= char(1 << (rng() % 8)); break;
      case 1: bytes[size_t(header_end + rng() % (bytes.size() - header_end))] ^= char(1 << (rng() % 8)); break;
      case 2: bytes.resize(size_t(rng() % bytes.size())); break;
      default: bytes += std::string(size_t(1 + rng() % 64), char(rng())); break;
    }
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }
    std::optional<DecodedRevision> want, got;
    bool want_error = false, got_error = false;
    std::string got_message;
    try {
      want = decode_revision(bytes, "blob");
    } catch (const Error&) {
      want_error = true;
    }
    Sha256 digest;
    try {
      got = read_revision_file(FileReader(path), "blob", &digest);
    } catch (const Error& e) {
      got_error = true;
      got_message = e.what();
    }
    ASSERT_EQ(got_error, want_error) << "mutation " << i << ": " << got_message;
    if (got_error) {
      ++refused;
      continue;
    }
    ++accepted;
    EXPECT_EQ(digest.finish_hex(), sha256_hex(bytes)) << "mutation " << i;
    EXPECT_EQ(got->meta.rank, want->meta.rank);
    std::vector<std::string> gn, wn;
    std::vector<const Tensor*> gt, wt;
    engine::for_each_lora_tensor(got->weights, [&](const std::string& n, const Tensor& t) {
      gn.push_back(n);
      gt.push_back(&t);
    });
    engine::for_each_lora_tensor(want->weights, [&](const std::string& n, const Tensor& t) {
      wn.push_back(n);
      wt.push_back(&t);
    });
    ASSERT_EQ(gn, wn) << "mutation " << i;
    for (size_t k = 0; k < gt.size(); ++k) {
      ASSERT_EQ(gt[k]->shape(), wt[k]->shape());
      ASSERT_EQ(0, std::memcmp(gt[k]->data(), wt[k]->data(), size_t(gt[k]->numel()) * 4))
          << "mutation " << i << " " << gn[k];
    }
  }
  // Data bit flips and appended bytes decode (the digest is the blob store's check); header
  // flips and truncations mostly do not.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
  fs::remove_all(dir);
}

TEST_F(BlobStoreTest, TruncatedCopyIsRewrittenByPut) {
  const std::string id = store_.put("0123456789");
  fs::resize_file(store_.path_of(id), 3);
  EXPECT_THROW(store_.get(id), Error);
  store_.put("0123456789");
  EXPECT_EQ(store_.get(id), "0123456789");
}

// A producer emitting `pieces` in order (what put_stream calls twice, on two threads).
BlobProducer pieces_of(std::vector<std::string> pieces) {
  return [pieces = std::move(pieces)](const BlobWrite& write) {
    for (const std::string& p : pieces) write(p.data(), p.size());
  };
}

// Entries of the store's root that are temp files (a put_stream in flight or crashed).
size_t root_temp_files(const fs::path& root) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
  }
  return n;
}

TEST_F(BlobStoreTest, PutStreamStoresWhatPutStoresUnderTheSameId) {
  std::string big(9 << 20, '\0');  // past FileSink's 8 MiB writeback hint, in uneven pieces
  std::mt19937 rng(5);
  for (char& c : big) c = char(rng());
  const std::vector<std::string> pieces = {"head:", big.substr(0, 1000), big.substr(1000),
                                           std::string(), ":tail"};
  const std::string whole = "head:" + big + ":tail";
  const BlobPut put = store_.put_stream(pieces_of(pieces));
  EXPECT_EQ(put.id, sha256_hex(whole));
  EXPECT_EQ(put.bytes, whole.size());
  EXPECT_EQ(store_.get(put.id), whole);
  EXPECT_EQ(store_.put(whole), put.id);  // the same blob, not a second file
  EXPECT_EQ(count_files(root_), 1u);
  EXPECT_EQ(root_temp_files(root_), 0u);
}

TEST_F(BlobStoreTest, PutStreamKeepsAnIntactCopyAndRepairsADamagedOne) {
  const BlobPut first = store_.put_stream(pieces_of({"same ", "bytes"}));
  age(store_.path_of(first.id), 7200);
  const auto old_time = fs::last_write_time(store_.path_of(first.id));
  const BlobPut again = store_.put_stream(pieces_of({"same bytes"}));
  EXPECT_EQ(again.id, first.id);
  EXPECT_GT(fs::last_write_time(store_.path_of(first.id)), old_time);  // GC protocol step 2
  EXPECT_EQ(count_files(root_), 1u);
  EXPECT_EQ(root_temp_files(root_), 0u);
  {  // one flipped byte, same size: put_stream re-hashes the stored copy and replaces it
    std::fstream f(store_.path_of(first.id), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2);
    f.put('X');
  }
  EXPECT_EQ(catch_error([&] { store_.get(first.id); }).code, ErrorCode::data_loss);
  store_.put_stream(pieces_of({"same bytes"}));
  EXPECT_EQ(store_.get(first.id), "same bytes");
}

// on_written: once, on the calling thread, when the whole content is in the temp file and
// before the blob exists under its name; never when the producer fails.
// on_written comes once, on the calling thread (the writer's), after the producer has handed
// every byte to the temp file (the tail of a direct write may still be on its way to the disk)
// and before the blob has its name.
TEST_F(BlobStoreTest, PutStreamCallsOnWrittenOnceTheBytesAreWritten) {
  const std::string whole = "written, not yet named";
  int calls = 0;
  size_t temp_files = 0, handed_at_call = 0;
  std::atomic<size_t> handed{0};  // bytes the calling thread's producer wrote to the sink
  bool named = true;
  const auto caller = std::this_thread::get_id();
  const BlobProducer producer = [&](const BlobWrite& write) {
    for (std::string_view p : {std::string_view("written, "), std::string_view("not yet named")}) {
      write(p.data(), p.size());
      if (std::this_thread::get_id() == caller) handed += p.size();
    }
  };
  const BlobPut put = store_.put_stream(producer, [&] {
    ++calls;
    EXPECT_EQ(std::this_thread::get_id(), caller);
    handed_at_call = handed;
    temp_files = root_temp_files(root_);
    named = fs::exists(store_.path_of(sha256_hex(whole)));
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(handed_at_call, whole.size());
  EXPECT_EQ(temp_files, 1u);
  EXPECT_FALSE(named);
  EXPECT_EQ(store_.get(put.id), whole);

  const BlobProducer failing = [](const BlobWrite& write) {
    write("partial", 7);
    SPINDLE_THROW(invalid_argument, "tensor 'layers.0.q_proj' has the wrong shape");
  };
  calls = 0;
  catch_error([&] { store_.put_stream(failing, [&] { ++calls; }); });
  EXPECT_EQ(calls, 0);
}

TEST_F(BlobStoreTest, PutStreamThatThrowsLeavesNothingBehind) {
  const BlobProducer failing = [](const BlobWrite& write) {
    write("partial", 7);
    SPINDLE_THROW(invalid_argument, "tensor 'layers.0.q_proj' has the wrong shape");
  };
  const auto err = catch_error([&] { store_.put_stream(failing); });
  EXPECT_EQ(err.code, ErrorCode::invalid_argument);
  EXPECT_NE(err.message.find("layers.0.q_proj"), std::string::npos) << err.message;
  EXPECT_EQ(count_files(root_), 0u);
  EXPECT_EQ(root_temp_files(root_), 0u);
}

// gc with grace 0 may remove a put_stream's temp file while it is written (no lock covers
// it): the put fails with an error naming the store, and stores nothing.
TEST_F(BlobStoreTest, PutStreamWhoseTempFileWasRemovedFailsCleanly) {
  const fs::path root = root_;
  const BlobProducer racing_gc = [root](const BlobWrite& write) {
    write("first half ", 11);
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.path().filename().string().find(".tmp-") != std::string::npos) fs::remove(e.path());
    }
    write("second half", 11);
  };
  const auto err = catch_error([&] { store_.put_stream(racing_gc); });
  EXPECT_NE(err.message.find(root_.string()), std::string::npos) << err.message;
  EXPECT_FALSE(store_.exists(sha256_hex("first half second half")));
  EXPECT_EQ(count_files(root_), 0u);
  EXPECT_EQ(root_temp_files(root_), 0u);
}

TEST_F(BlobStoreTest, MissingAndMalformedIds) {
  const auto missing = catch_error([&] { store_.get(sha256_hex("never stored")); });
  EXPECT_EQ(missing.code, ErrorCode::not_found);
  EXPECT_NE(missing.message.find(sha256_hex("never stored")), std::string::npos);
  const auto bad = catch_error([&] { store_.get("../../etc/passwd"); });
  EXPECT_EQ(bad.code, ErrorCode::invalid_argument);
  EXPECT_FALSE(store_.exists(sha256_hex("nope")));
}

TEST_F(BlobStoreTest, RemoveDeletesOneBlobWhateverItsAge) {
  const std::string a = store_.put("young blob"), b = store_.put("kept blob");
  EXPECT_EQ(store_.remove(a), 10u);  // its size
  EXPECT_FALSE(store_.exists(a));
  EXPECT_TRUE(store_.exists(b));
  EXPECT_EQ(store_.remove(a), std::nullopt);  // already gone
  EXPECT_EQ(catch_error([&] { store_.remove("not-a-blob-id"); }).code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(store_.put("young blob"), a);  // put writes it anew
  EXPECT_EQ(store_.get(a), "young blob");
}

TEST_F(BlobStoreTest, GcDeletesOnlyOldUnreferencedBlobs) {
  const std::string keep = store_.put("referenced");
  const std::string old_orphan = store_.put("old orphan");
  const std::string young_orphan = store_.put("young orphan");
  age(store_.path_of(keep), 7200);
  age(store_.path_of(old_orphan), 7200);
  // A stale temp file from a crashed put, and a file that is not a blob.
  const fs::path tmp = root_ / keep.substr(0, 2) / ("." + keep + ".tmp-abcdef");
  std::ofstream(tmp) << "partial";
  age(tmp, 7200);
  // And a crashed put_stream's temp file in the root, next to a young one still being written.
  const fs::path stream_tmp = root_ / ".put.tmp-ghijkl";
  const fs::path live_tmp = root_ / ".put.tmp-mnopqr";
  std::ofstream(stream_tmp) << "partial";
  std::ofstream(live_tmp) << "being written";
  age(stream_tmp, 7200);
  std::ofstream(root_ / keep.substr(0, 2) / "README") << "not a blob";

  int batches = 0;
  BlobGcOptions options;
  options.grace = std::chrono::hours(1);
  options.run_batch = [&](const std::function<void()>& batch) {
    ++batches;
    batch();
  };
  const BlobGcReport r = store_.gc([&](std::string_view id) { return id == keep; }, options);
  EXPECT_EQ(r.deleted, 1u);
  EXPECT_EQ(r.bytes_freed, 10u);
  EXPECT_EQ(r.referenced, 1u);
  EXPECT_EQ(r.young, 1u);
  EXPECT_EQ(r.temp_removed, 2u);
  EXPECT_EQ(r.foreign, 1u);
  EXPECT_GE(batches, 1);
  EXPECT_TRUE(store_.exists(keep));
  EXPECT_FALSE(store_.exists(old_orphan));
  EXPECT_TRUE(store_.exists(young_orphan));  // inside the grace period: a commit may be in flight
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(stream_tmp));
  EXPECT_TRUE(fs::exists(live_tmp));

  // grace 0: anything written before GC started and unreferenced goes. (Aged by 10 s so it
  // cannot share a coarse filesystem timestamp tick with the start of this GC.)
  age(store_.path_of(young_orphan), 10);
  age(live_tmp, 10);
  const BlobGcReport r0 = store_.gc([&](std::string_view id) { return id == keep; },
                                    {.grace = std::chrono::seconds(0)});
  EXPECT_EQ(r0.deleted, 1u);
  // Grace 0 treats every temp file as a crash's leftover, the root's included.
  EXPECT_FALSE(fs::exists(live_tmp));
  EXPECT_EQ(r0.temp_removed, 1u);
  EXPECT_FALSE(store_.exists(young_orphan));
  EXPECT_TRUE(store_.exists(keep));
}

TEST_F(BlobStoreTest, GcNeverDeletesABlobWrittenAfterItStarted) {
  // GC's start is the filesystem's clock when it begins; a blob stamped at or after it is
  // kept even with grace 0 and nothing referencing it.
  const std::string late = store_.put("written while gc runs");
  fs::last_write_time(store_.path_of(late),
                      fs::last_write_time(store_.path_of(late)) + std::chrono::seconds(30));
  const BlobGcReport r =
      store_.gc([](std::string_view) { return false; }, {.grace = std::chrono::seconds(0)});
  EXPECT_EQ(r.deleted, 0u);
  EXPECT_EQ(r.young, 1u);
  EXPECT_TRUE(store_.exists(late));
}

}  // namespace
}  // namespace spindle::adapters
