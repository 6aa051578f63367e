// core/file_io: whole-file reads, positioned reads, atomic replacement.

#include "spindle/core/file_io.h"

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

}  // namespace
}  // namespace spindle::loader_test
