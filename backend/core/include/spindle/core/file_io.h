#pragma once
// File helpers shared by loaders and stores. Every failure is a spindle::Error naming the path
// (and the offset for positioned reads); an errno becomes its code through
// error_code_for_errno, so a full disk or quota (ENOSPC, EDQUOT) is `resource`, not `io`. Model weights are read with pread into memory the
// process owns — never mmap: the host evicts file-backed pages under pressure, and a resident
// base must stay resident.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace spindle {

// Reads a whole (small) regular file: configs, indexes, tokenizers. Throws not_found when the
// path does not exist, invalid_argument when it is not a regular file or is larger than
// max_bytes, io when the OS refuses the read.
std::string read_file_to_string(const std::filesystem::path& path, size_t max_bytes = size_t(256)
                                                                                      << 20);

// A read-only regular file for positioned reads. size() is taken once at open. Thread-safe:
// read_at never moves a shared file position (pread), so concurrent reads are fine.
class FileReader {
 public:
  // Throws not_found (missing), invalid_argument (not a regular file), io (open refused).
  explicit FileReader(const std::filesystem::path& path);
  ~FileReader();
  FileReader(FileReader&& other) noexcept;
  FileReader& operator=(FileReader&& other) noexcept;
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads exactly n bytes at `offset` into dst. Retries EINTR and short reads. Throws format
  // when [offset, offset + n) extends past size() (the file is truncated), io when the OS
  // fails or the file shrank underneath us; both name the path and the offset.
  void read_at(uint64_t offset, void* dst, size_t n) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// How a FileSink writes.
//   buffered: through the page cache. Every 8 MiB written it asks the kernel to start writing
//     that range back (sync_file_range, no wait), so the disk works while the writer produces
//     the rest and the final fsync only waits for the tail.
//   direct: O_DIRECT from a 4 KiB-aligned staging buffer, 4 MiB at a time: the bytes go from
//     the writer's memory to the disk with one memcpy and no page-cache pages (no copy into
//     them, no fresh pages to fault in, no writeback at fsync). The staging buffers are
//     recycled (two kept for the process), so a large write touches no fresh memory either.
//     The tail is padded to the alignment and the file truncated back to its length. Where
//     the filesystem refuses O_DIRECT (tmpfs, or EINVAL on a write) the sink goes on buffered.
enum class WriteMode { buffered, direct };

// Sink handed to a write_file_atomic / write_temp_file writer. write() appends; errors throw
// io naming the file (resource when the disk is full or the quota is spent).
class FileSink {
 public:
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  uint64_t bytes_written() const { return written_; }
  // Puts what the sink still holds into the file (direct: the padded tail, then the file
  // truncated to bytes_written()), so the file holds every byte written; no write may follow.
  // write_temp_file calls it after the writer if the writer did not.
  void finish();

 private:
  friend std::filesystem::path write_temp_file(const std::filesystem::path&, std::string_view,
                                               const std::filesystem::path&,
                                               const std::function<void(FileSink&)>&, WriteMode);
  FileSink(int fd, const std::filesystem::path& path, WriteMode mode);
  void write_buffered(const char* p, size_t n);
  // pwrite of staging [0, padded) at direct_at_ (padded: a multiple of the alignment); `valid`
  // of those bytes are data. Falls back to buffered writes of the valid bytes on EINVAL.
  void write_staged(size_t valid, size_t padded);
  void disable_direct();
  void truncate_to_written();  // drops the direct write's padding past bytes_written()

  int fd_;
  const std::filesystem::path& path_;
  uint64_t written_ = 0;
  uint64_t flushed_ = 0;  // buffered: bytes already handed to writeback
  char* staging_ = nullptr;  // direct: a 4 MiB aligned buffer from the pool; null = buffered
  size_t staged_ = 0;        // direct: bytes in staging_
  uint64_t direct_at_ = 0;   // direct: file offset of staging_[0]
  bool finished_ = false;
};

// Writes a new file in `dir` named "<stem>.tmp-XXXXXX" (mode 0644) with what `writer` writes
// (`mode`, above), fsyncs it and returns its path: the caller renames it into place (then fsyncs that
// directory) or removes it. If the writer or the OS fails, the file is removed and the error
// propagates (not_found when `dir` does not exist; resource for a full disk), naming `named`:
// what the caller is making.
std::filesystem::path write_temp_file(const std::filesystem::path& dir, std::string_view stem,
                                      const std::filesystem::path& named,
                                      const std::function<void(FileSink&)>& writer,
                                      WriteMode mode = WriteMode::buffered);

// fsync of a directory, so a rename or create inside it survives a crash. Throws io (or
// resource) naming the directory.
void fsync_directory(const std::filesystem::path& dir);

// Replaces `path` atomically: writes a temp file in the same directory, fsyncs it, renames it
// over `path`, then fsyncs the directory. Readers see the old content or the new, never a
// mix; after return the new content survives a crash. If the writer throws, the temp file is
// removed, `path` is untouched and the exception propagates. The directory must exist. On a
// full disk (at create, write, fsync, close or rename) the temp file is removed too: a failed
// call never leaves a partial `path`, and it frees what it took.
void write_file_atomic(const std::filesystem::path& path,
                       const std::function<void(FileSink&)>& writer);
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace spindle
