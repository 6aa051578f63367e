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

// Sink handed to a write_file_atomic writer. write() appends; errors throw io naming the file
// (resource when the disk is full or the quota is spent). Every 8 MiB written it asks the
// kernel to start writing that range back (sync_file_range, no wait), so the disk works while
// the writer produces the rest and the final fsync only waits for the tail.
class FileSink {
 public:
  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  uint64_t bytes_written() const { return written_; }

 private:
  friend std::filesystem::path write_temp_file(const std::filesystem::path&, std::string_view,
                                               const std::filesystem::path&,
                                               const std::function<void(FileSink&)>&);
  FileSink(int fd, const std::filesystem::path& path) : fd_(fd), path_(path) {}
  int fd_;
  const std::filesystem::path& path_;
  uint64_t written_ = 0;
  uint64_t flushed_ = 0;  // bytes already handed to writeback
};

// Writes a new file in `dir` named "<stem>.tmp-XXXXXX" (mode 0644) with what `writer` writes,
// fsyncs it and returns its path: the caller renames it into place (then fsyncs that
// directory) or removes it. If the writer or the OS fails, the file is removed and the error
// propagates (not_found when `dir` does not exist; resource for a full disk), naming `named`:
// what the caller is making.
std::filesystem::path write_temp_file(const std::filesystem::path& dir, std::string_view stem,
                                      const std::filesystem::path& named,
                                      const std::function<void(FileSink&)>& writer);

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
