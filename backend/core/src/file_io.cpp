#include "spindle/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "spindle/core/error.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;

std::string errno_text(int err) {
  return std::strerror(err);
}

// Opens a regular file read-only and returns (fd, size). The caller owns the fd.
std::pair<int, uint64_t> open_regular(const fs::path& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    SPINDLE_CHECK(err != ENOENT && err != ENOTDIR, not_found, "{}: no such file", path.string());
    SPINDLE_THROW(io, "{}: cannot open: {}", path.string(), errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    SPINDLE_THROW(io, "{}: cannot stat: {}", path.string(), errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    SPINDLE_THROW(invalid_argument, "{}: not a regular file", path.string());
  }
  return {fd, uint64_t(st.st_size)};
}

void fsync_or_throw(int fd, const fs::path& what) {
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  // Some filesystems refuse fsync on directories (EINVAL); the rename is still atomic there.
  // ENOSPC/EDQUOT here is a delayed-allocation or NFS filesystem running out at writeback.
  if (rc != 0 && errno != EINVAL) {
    const int err = errno;
    throw Error(error_code_for_errno(err),
                fmt::format("{}: fsync failed: {}", what.string(), errno_text(err)));
  }
}

// Throws the errno's code (resource for a full disk or quota) with `message`.
[[noreturn]] void throw_errno(int err, const std::string& message) {
  throw Error(error_code_for_errno(err), message);
}

}  // namespace

std::string read_file_to_string(const fs::path& path, size_t max_bytes) {
  FileReader reader(path);
  SPINDLE_CHECK(reader.size() <= max_bytes, invalid_argument,
                "{}: file is {} bytes, more than the {} bytes allowed for this kind of file",
                path.string(), reader.size(), max_bytes);
  std::string text(size_t(reader.size()), '\0');
  reader.read_at(0, text.data(), text.size());
  return text;
}

FileReader::FileReader(const fs::path& path) : path_(path) {
  auto [fd, size] = open_regular(path);
  fd_ = fd;
  size_ = size;
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

FileReader::FileReader(FileReader&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
  other.size_ = 0;
}

FileReader& FileReader::operator=(FileReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
    other.size_ = 0;
  }
  return *this;
}

void FileReader::read_at(uint64_t offset, void* dst, size_t n) const {
  SPINDLE_CHECK(fd_ >= 0, invalid_argument, "{}: read from a closed FileReader", path_.string());
  SPINDLE_CHECK(offset <= size_ && n <= size_ - offset, format,
                "{}: read of {} bytes at offset {} goes past the end of the file ({} bytes); "
                "the file is truncated",
                path_.string(), n, offset, size_);
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    // Linux caps a single read at ~2 GiB; larger tensors take several calls.
    const size_t chunk = std::min<size_t>(n - done, size_t(1) << 30);
    const ssize_t got = ::pread(fd_, out + done, chunk, off_t(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      SPINDLE_THROW(io, "{}: read of {} bytes at offset {} failed: {}", path_.string(), chunk,
                    offset + done, errno_text(errno));
    }
    SPINDLE_CHECK(got > 0, io,
                  "{}: unexpected end of file at offset {} (file was {} bytes when opened; "
                  "was it modified while loading?)",
                  path_.string(), offset + done, size_);
    done += size_t(got);
  }
}

namespace {

constexpr size_t kDirectAlign = 4096;           // offsets, lengths and memory of O_DIRECT I/O
constexpr size_t kDirectChunk = size_t(4) << 20;  // one staging buffer

// Recycled staging buffers for direct writes: at most kKept stay allocated between writes, so
// a save's 4 MiB is memory the process already touched.
class StagingPool {
 public:
  static constexpr size_t kKept = 2;
  StagingPool() { free_.reserve(kKept); }  // give() never allocates (it runs in destructors)
  char* take() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        char* b = free_.back();
        free_.pop_back();
        return b;
      }
    }
    return static_cast<char*>(std::aligned_alloc(kDirectAlign, kDirectChunk));  // null: buffered
  }
  void give(char* b) {
    {
      std::lock_guard lock(mutex_);
      if (free_.size() < kKept) {
        free_.push_back(b);
        return;
      }
    }
    std::free(b);
  }

 private:
  std::mutex mutex_;
  std::vector<char*> free_;
};

StagingPool& staging_pool() {
  static StagingPool* pool = new StagingPool;  // never destroyed: sinks may outlive statics
  return *pool;
}

}  // namespace

FileSink::FileSink(int fd, const fs::path& path, WriteMode mode) : fd_(fd), path_(path) {
  if (mode != WriteMode::direct) return;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags | O_DIRECT) != 0) return;  // tmpfs: buffered
  staging_ = staging_pool().take();
  if (staging_ == nullptr) disable_direct();
}

FileSink::~FileSink() {
  if (staging_ != nullptr) staging_pool().give(staging_);
}

void FileSink::disable_direct() {
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd_, F_SETFL, flags & ~O_DIRECT);
  if (staging_ != nullptr) staging_pool().give(staging_);
  staging_ = nullptr;
}

void FileSink::write(const void* data, size_t n) {
  SPINDLE_CHECK(!finished_, internal, "{}: write of {} bytes after finish()", path_.string(), n);
  const auto* p = static_cast<const char*>(data);
  while (staging_ != nullptr && n > 0) {
    const size_t take = std::min(n, kDirectChunk - staged_);
    std::memcpy(staging_ + staged_, p, take);
    staged_ += take;
    written_ += take;
    p += take;
    n -= take;
    if (staged_ == kDirectChunk) write_staged(kDirectChunk, kDirectChunk);
  }
  if (n > 0) write_buffered(p, n);
}

void FileSink::write_staged(size_t valid, size_t padded) {
  const char* buf = staging_;
  size_t done = 0;
  while (done < padded) {
    const ssize_t put = ::pwrite(fd_, buf + done, padded - done, off_t(direct_at_ + done));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && errno == EINVAL) {
      // The filesystem takes O_DIRECT at open but not this write (or not after a short one):
      // buffered from here on, from the first staged byte not yet in the file (written_ back
      // to what is there; write_buffered advances it again).
      const size_t kept = std::min(done, valid);
      char* staged = staging_;
      staging_ = nullptr;
      disable_direct();
      staged_ = 0;
      written_ = direct_at_ + kept;
      try {
        if (done > valid) truncate_to_written();  // padding is in the file
        write_buffered(staged + kept, valid - kept);
      } catch (...) {
        staging_pool().give(staged);
        throw;
      }
      staging_pool().give(staged);
      return;
    }
    if (put <= 0) {
      const int err = put < 0 ? errno : EIO;
      throw_errno(err, fmt::format("{}: write of {} bytes at offset {} failed: {}",
                                   path_.string(), padded - done, direct_at_ + done,
                                   errno_text(err)));
    }
    done += size_t(put);
  }
  direct_at_ += valid;
  staged_ = 0;
}

void FileSink::write_buffered(const char* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    const size_t chunk = std::min<size_t>(n - done, size_t(1) << 30);
    const ssize_t put = ::pwrite(fd_, p + done, chunk, off_t(written_));
    if (put < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw_errno(err, fmt::format("{}: write of {} bytes at offset {} failed: {}",
                                   path_.string(), chunk, written_, errno_text(err)));
    }
    done += size_t(put);
    written_ += uint64_t(put);
  }
  constexpr uint64_t kWritebackEvery = uint64_t(8) << 20;
  if (written_ - flushed_ >= kWritebackEvery) {
    // A hint: start writeback of what is written so far, without waiting. Errors surface at
    // the fsync that makes the file durable, so the result is ignored here.
    (void)::sync_file_range(fd_, off64_t(flushed_), off64_t(written_ - flushed_),
                            SYNC_FILE_RANGE_WRITE);
    flushed_ = written_;
  }
}

void FileSink::finish() {
  if (finished_) return;
  if (staging_ == nullptr || staged_ == 0) {
    finished_ = true;
    return;
  }
  const size_t valid = staged_;
  const size_t padded = (valid + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  std::memset(staging_ + valid, 0, padded - valid);
  write_staged(valid, padded);
  if (staging_ != nullptr && padded != valid) truncate_to_written();
  finished_ = true;
}

void FileSink::truncate_to_written() {
  if (::ftruncate(fd_, off_t(written_)) != 0) {
    const int err = errno;
    throw_errno(err, fmt::format("{}: truncating to {} bytes failed: {}", path_.string(),
                                 written_, errno_text(err)));
  }
}

fs::path write_temp_file(const fs::path& dir, std::string_view stem, const fs::path& named,
                         const std::function<void(FileSink&)>& writer, WriteMode mode) {
  std::string tmpl = (dir / (std::string(stem) + ".tmp-XXXXXX")).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    SPINDLE_CHECK(err != ENOENT, not_found, "{}: directory {} does not exist", named.string(),
                  dir.string());
    throw_errno(err, fmt::format("{}: cannot create a temp file in {}: {}", named.string(),
                                 dir.string(), errno_text(err)));
  }
  const fs::path tmp(name.data());
  try {
    ::fchmod(fd, 0644);  // mkostemp creates 0600; published files are world-readable
    FileSink sink(fd, named, mode);
    writer(sink);
    sink.finish();
    fsync_or_throw(fd, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 && errno != EINTR) {
    const int err = errno;  // NFS reports a full disk at close
    ::unlink(tmp.c_str());
    throw_errno(err, fmt::format("{}: close of temp file failed: {}", named.string(),
                                 errno_text(err)));
  }
  return tmp;
}

void fsync_directory(const fs::path& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    throw_errno(err, fmt::format("cannot open directory {} to fsync it: {}", dir.string(),
                                 errno_text(err)));
  }
  try {
    fsync_or_throw(dfd, dir);
  } catch (...) {
    ::close(dfd);
    throw;
  }
  ::close(dfd);
}

void write_file_atomic(const fs::path& path, const std::function<void(FileSink&)>& writer) {
  SPINDLE_CHECK(path.has_filename(), invalid_argument, "write_file_atomic: '{}' names no file",
                path.string());
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const fs::path tmp =
      write_temp_file(dir, fmt::format(".{}", path.filename().string()), path, writer);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;  // ENOSPC when the directory itself must grow
    ::unlink(tmp.c_str());
    throw_errno(err, fmt::format("{}: rename from {} failed: {}", path.string(), tmp.string(),
                                 errno_text(err)));
  }
  fsync_directory(dir);
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  write_file_atomic(path, [&](FileSink& sink) { sink.write(bytes); });
}

}  // namespace spindle
