// core/file_io: whole-file reads, positioned reads, atomic replacement, direct writes.

#include "spindle/core/file_io.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "loader_test_util.h"

namespace spindle::loader_test {
namespace {

TEST(FileIo, ReadFileToString) {
  TempDir dir("fio");
  write_bytes(dir / "a.txt", std::string("hello\0world", 11));
  EXPECT_EQ(read_file_to_string(dir / "a.txt"), std::string("hello\0world", 11));
  write_bytes(dir / "empty", "");
  EXPECT_EQ(read_file_to_string(dir / "empty"), "");

  auto missing = catch_error([&] { read_file_to_string(dir / "nope.json"); });
  EXPECT_EQ(missing.code, ErrorCode::not_found);
  EXPECT_TRUE(missing.has("nope.json")) << missing.message;
  auto is_dir = catch_error([&] { read_file_to_string(dir.path()); });
  EXPECT_EQ(is_dir.code, ErrorCode::invalid_argument);
  EXPECT_TRUE(is_dir.has("not a regular file")) << is_dir.message;
  EXPECT_SPINDLE_ERROR(read_file_to_string(dir / "a.txt", 4), "a.txt", "11 bytes");
}

TEST(FileIo, ReaderReadsAtOffsetsAndNamesPathAndOffsetPastTheEnd) {
  TempDir dir("fio");
  std::string bytes(1000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char(i * 7);
  write_bytes(dir / "f.bin", bytes);
  FileReader r(dir / "f.bin");
  EXPECT_EQ(r.size(), 1000u);
  char buf[10];
  r.read_at(995, buf, 5);
  EXPECT_EQ(std::string(buf, 5), bytes.substr(995, 5));
  r.read_at(1000, buf, 0);  // an empty read at the end is fine
  auto past = catch_error([&] { r.read_at(996, buf, 10); });
  EXPECT_EQ(past.code, ErrorCode::format);
  EXPECT_TRUE(past.has("f.bin") && past.has("offset 996") && past.has("truncated")) << past.message;
  EXPECT_SPINDLE_ERROR(r.read_at(~uint64_t(0), buf, 1), "f.bin");

  FileReader moved = std::move(r);
  moved.read_at(0, buf, 3);
  EXPECT_EQ(std::string(buf, 3), bytes.substr(0, 3));
}

TEST(FileIo, AtomicWriteReplacesAndLeavesNoTempFiles) {
  TempDir dir("fio");
  const auto p = dir / "out.json";
  write_file_atomic(p, "first");
  EXPECT_EQ(read_bytes(p), "first");
  write_file_atomic(p, [](FileSink& s) {
    s.write("sec", 3);
    s.write(std::string_view("ond"));
    EXPECT_EQ(s.bytes_written(), 6u);
  });
  EXPECT_EQ(read_bytes(p), "second");
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::others_read, fs::perms::others_read);

  // A writer that throws leaves the old content and no temp file behind.
  EXPECT_THROW(write_file_atomic(p,
                                 [](FileSink& s) {
                                   s.write("partial", 7);
                                   throw std::runtime_error("writer failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read_bytes(p), "second");
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(e.path().filename(), "out.json");
  }
  EXPECT_EQ(files, 1u);

  auto no_dir = catch_error([&] { write_file_atomic(dir / "missing" / "x", "y"); });
  EXPECT_EQ(no_dir.code, ErrorCode::not_found);
  EXPECT_TRUE(no_dir.has("missing")) << no_dir.message;
}


// `n` bytes of a pattern that differs at every offset (a misplaced chunk shows).
std::string pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = char(x >> 24);
  }
  return s;
}

// Writes `bytes` through write_temp_file in `mode`, in pieces of irregular sizes (single bytes,
// pieces straddling the 4 KiB alignment and the 4 MiB staging buffer, one larger than it).
fs::path write_in_pieces(const fs::path& dir, const std::string& bytes, WriteMode mode) {
  return write_temp_file(dir, "t", dir / "named", [&](FileSink& sink) {
    static const size_t kPieces[] = {1, 7, 4089, 4096, 100000, 5 << 20, 3, 65536};
    size_t at = 0, k = 0;
    while (at < bytes.size()) {
      const size_t n = std::min(kPieces[k++ % std::size(kPieces)], bytes.size() - at);
      sink.write(bytes.data() + at, n);
      at += n;
      EXPECT_EQ(sink.bytes_written(), at);
    }
  }, mode);
}

// Pages of `path` in the page cache (mincore over a mapping of the file).
size_t resident_pages(const fs::path& path) {
  const size_t size = fs::file_size(path);
  if (size == 0) return 0;
  const int fd = ::open(path.c_str(), O_RDONLY);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE)), pages = (size + page - 1) / page;
  std::vector<unsigned char> in(pages);
  ::mincore(map, size, in.data());
  ::munmap(map, size);
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

// Every length around the alignment and the staging buffer comes back byte for byte, at its
// exact size (the padded tail truncated), in both modes.
TEST(FileIo, DirectAndBufferedWritesAreByteExactAtEveryLength) {
  TempDir dir("fio");
  const std::string all = pattern((size_t(9) << 20) + 123);
  for (WriteMode mode : {WriteMode::direct, WriteMode::buffered}) {
    for (size_t n : {size_t(0), size_t(1), size_t(4095), size_t(4096), size_t(4097),
                     (size_t(4) << 20) - 1, size_t(4) << 20, (size_t(4) << 20) + 1,
                     all.size()}) {
      const fs::path p = write_in_pieces(dir.path(), all.substr(0, n), mode);
      ASSERT_EQ(fs::file_size(p), n) << "length " << n;
      ASSERT_TRUE(read_bytes(p) == all.substr(0, n)) << "length " << n;
      fs::remove(p);
    }
  }
}

// A direct write leaves none of the file in the page cache (the bytes went from the staging
// buffer to the disk; at most the block the truncation cut, which the filesystem zeroes
// through the cache); a buffered one leaves it there. Skipped where the test directory is in
// memory (tmpfs) or its filesystem refuses O_DIRECT (the sink then writes buffered, as the
// next test checks).
TEST(FileIo, DirectWritesBypassThePageCache) {
  TempDir dir("fio");
  struct statfs fsinfo {};
  if (::statfs(dir.path().c_str(), &fsinfo) == 0 && fsinfo.f_type == TMPFS_MAGIC) {
    GTEST_SKIP() << dir.path() << " is on tmpfs: its pages are the file";
  }
  const int probe = ::open((dir / "probe").c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0600);
  if (probe < 0) GTEST_SKIP() << "the filesystem of " << dir.path() << " refuses O_DIRECT";
  ::close(probe);
  const std::string bytes = pattern((size_t(6) << 20) + 5);
  const fs::path direct = write_in_pieces(dir.path(), bytes, WriteMode::direct);
  const fs::path buffered = write_in_pieces(dir.path(), bytes, WriteMode::buffered);
  EXPECT_LE(resident_pages(direct), 1u);
  EXPECT_GT(resident_pages(buffered), (size_t(6) << 20) / 4096 / 2);
  EXPECT_TRUE(read_bytes(direct) == bytes);
}

// On tmpfs (memory, no disk to go direct to) a direct-mode write still lands byte for byte.
TEST(FileIo, DirectWritesOnTmpfsLandByteForByte) {
  const fs::path shm = "/dev/shm";
  if (!fs::is_directory(shm)) GTEST_SKIP() << "no /dev/shm (tmpfs) on this machine";
  const fs::path dir = shm / ("spindle_fio_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bytes = pattern((size_t(5) << 20) + 3);
  const fs::path p = write_in_pieces(dir, bytes, WriteMode::direct);
  EXPECT_EQ(fs::file_size(p), bytes.size());
  EXPECT_TRUE(read_bytes(p) == bytes);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spindle::loader_test
