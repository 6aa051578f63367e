#include "spindle/adapters/blob_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "spindle/adapters/sha256.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"

namespace spindle::adapters {
namespace {

namespace fs = std::filesystem;

int64_t to_ns(const struct timespec& t) {
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// errno -> code (resource for a full disk or quota), with the caller's message.
[[noreturn]] void throw_errno(int err, const std::string& message) {
  throw Error(error_code_for_errno(err), message);
}

// A fan-out directory must itself be durable before a blob inside it is acknowledged.
void ensure_fanout(const fs::path& root, const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0) {
    fsync_directory(root);
    return;
  }
  const int err = errno;
  if (err == EEXIST) return;
  throw_errno(err, fmt::format("blob store: cannot create directory {}: {}", dir.string(),
                               std::strerror(err)));
}

// flock on <root>/.lock through its own open file description, so it excludes other threads
// of this process as well as other processes. Released on destruction.
class StoreLock {
 public:
  StoreLock(const fs::path& root, int operation) {
    const fs::path path = root / ".lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int err = errno;  // ENOSPC: no inode left for a new store's lock file
      throw_errno(err, fmt::format("blob store: cannot open lock file {}: {}", path.string(),
                                   std::strerror(err)));
    }
    int rc;
    do {
      rc = ::flock(fd_, operation);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int err = errno;
      ::close(fd_);
      SPINDLE_THROW(io, "blob store: cannot lock {}: {}", path.string(), std::strerror(err));
    }
  }
  ~StoreLock() { ::close(fd_); }  // closing the last descriptor releases the flock
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  int fd_ = -1;
};

// The store's "now" on the filesystem's clock: the mtime of a freshly touched marker file.
int64_t filesystem_now_ns(const fs::path& root) {
  const fs::path path = root / ".gc-clock";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw_errno(err, fmt::format("blob store: cannot open {}: {}", path.string(),
                                 std::strerror(err)));
  }
  struct stat st {};
  const bool ok = ::futimens(fd, nullptr) == 0 && ::fstat(fd, &st) == 0;
  const int err = errno;
  ::close(fd);
  SPINDLE_CHECK(ok, io, "blob store: cannot touch {}: {}", path.string(), std::strerror(err));
  return to_ns(st.st_mtim);
}

bool is_fanout_name(const std::string& s) {
  return s.size() == 2 && is_sha256_hex(s + std::string(62, '0'));
}

// Whether the file at `path` holds exactly `bytes` (read and compared in 1 MiB chunks).
// false when it cannot be read: the caller rewrites it.
bool holds_exactly(const fs::path& path, std::string_view bytes) {
  try {
    const FileReader reader(path);
    if (reader.size() != bytes.size()) return false;
    std::string chunk;
    for (uint64_t at = 0; at < reader.size(); at += chunk.size()) {
      chunk.resize(size_t(std::min<uint64_t>(reader.size() - at, uint64_t(1) << 20)));
      reader.read_at(at, chunk.data(), chunk.size());
      if (bytes.compare(size_t(at), chunk.size(), chunk) != 0) return false;
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

BlobStore::BlobStore(fs::path root) : root_(std::move(root)) {
  std::error_code ec;
  const bool created = fs::create_directories(root_, ec);
  SPINDLE_CHECK(!ec, io, "blob store: cannot create {}: {}", root_.string(), ec.message());
  // A new root must itself survive a crash before blobs in it are acknowledged.
  if (created) fsync_directory(root_.has_parent_path() ? root_.parent_path() : fs::path("."));
}

fs::path BlobStore::path_of(std::string_view id) const {
  SPINDLE_CHECK(is_sha256_hex(id), invalid_argument,
                "blob id '{}' is malformed: expected 64 lowercase hex digits (a SHA-256)", id);
  return root_ / std::string(id.substr(0, 2)) / std::string(id);
}

namespace {

// A stored blob found intact is refreshed so a GC running now treats it as just written
// (protocol step 2). false when it vanished meanwhile (the caller writes it anew); any other
// failure throws naming it.
bool refresh_mtime(const fs::path& path) {
  if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0) return true;
  const int err = errno;
  if (err == ENOENT) return false;
  throw_errno(err, fmt::format("blob store: cannot touch {}: {}", path.string(),
                               std::strerror(err)));
}

}  // namespace

std::string BlobStore::put(std::string_view bytes) const {
  const std::string id = sha256_hex(bytes);
  const fs::path path = path_of(id);
  ensure_fanout(root_, path.parent_path());
  const StoreLock lock(root_, LOCK_SH);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && uint64_t(st.st_size) == bytes.size() &&
      holds_exactly(path, bytes) && refresh_mtime(path)) {
    return id;  // already stored, and intact
  }
  // Absent, or a damaged copy (wrong size or wrong bytes): (re)write it atomically, so
  // committing the same content again repairs a blob that get() reported as data_loss.
  write_file_atomic(path, bytes);
  return id;
}

namespace {

FileReader open_blob(const fs::path& path, std::string_view id, const fs::path& root) {
  try {
    return FileReader(path);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
    SPINDLE_THROW(not_found, "blob {} not found in {}", id, root.string());
  }
}

[[noreturn]] void throw_corrupt(std::string_view id, const fs::path& path, uint64_t size,
                                const std::string& actual) {
  SPINDLE_THROW(data_loss,
                "blob {} is corrupt: {} ({} bytes) hashes to {}; the stored copy is damaged "
                "and must be restored from a backup or re-committed",
                id, path.string(), size, actual);
}

// SHA-256 of the whole file, read in bounded chunks.
std::string file_sha256_hex(const FileReader& file) {
  Sha256 h;
  std::vector<char> chunk(size_t(1) << 20);
  for (uint64_t pos = 0; pos < file.size();) {
    const size_t n = size_t(std::min<uint64_t>(chunk.size(), file.size() - pos));
    file.read_at(pos, chunk.data(), n);
    h.update(chunk.data(), n);
    pos += n;
  }
  return h.finish_hex();
}

// What put_stream's errors name before the blob has a name.
fs::path new_blob_label(const fs::path& root) {
  return fs::path(fmt::format("blob store {}: new blob", root.string()));
}

// The size of the file at `path` when its bytes hash to `id`; nullopt when they do not, or it
// cannot be read.
std::optional<uint64_t> intact_size(const fs::path& path, std::string_view id) {
  try {
    const FileReader reader(path);
    if (file_sha256_hex(reader) == id) return reader.size();
  } catch (const Error&) {
  }
  return std::nullopt;
}

}  // namespace

BlobPut BlobStore::put_stream(const BlobProducer& produce,
                              const std::function<void()>& on_written) const {
  BlobPut out;
  std::exception_ptr hash_error;
  std::thread hasher([&] {
    try {
      Sha256 h;
      produce([&](const void* data, size_t n) { h.update(data, n); });
      out.id = h.finish_hex();
    } catch (...) {
      hash_error = std::current_exception();
    }
  });
  fs::path tmp;
  try {
    tmp = write_temp_file(root_, ".put", new_blob_label(root_), [&](FileSink& sink) {
      produce([&](const void* data, size_t n) { sink.write(data, n); });
      out.bytes = sink.bytes_written();
      if (on_written) on_written();  // the writer's CPU work is done (the tail goes after)
    }, WriteMode::direct);  // a revision: written once, read back from memory tiers
  } catch (const Error& e) {
    hasher.join();
    // A full disk does not stop a put of content already stored (put() writes nothing then
    // either): if the hash names an intact blob, refresh it as put() would.
    if (e.code() != ErrorCode::resource || hash_error) throw;
    const fs::path path = path_of(out.id);
    const StoreLock lock(root_, LOCK_SH);
    const std::optional<uint64_t> size = intact_size(path, out.id);
    if (!size || ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0) throw;
    out.bytes = *size;
    return out;
  } catch (...) {
    hasher.join();
    throw;
  }
  hasher.join();
  try {
    if (hash_error) std::rethrow_exception(hash_error);
    const fs::path path = path_of(out.id);
    ensure_fanout(root_, path.parent_path());
    const StoreLock lock(root_, LOCK_SH);  // protocol step 3, as put()
    if (intact_size(path, out.id) && refresh_mtime(path)) {  // already stored, and intact
      ::unlink(tmp.c_str());
      return out;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      throw_errno(err, fmt::format("blob store: cannot rename {} to {}: {}", tmp.string(),
                                   path.string(), std::strerror(err)));
    }
    tmp.clear();
    fsync_directory(path.parent_path());
    return out;
  } catch (...) {
    if (!tmp.empty()) ::unlink(tmp.c_str());
    throw;
  }
}

std::string BlobStore::get(std::string_view id) const {
  const fs::path path = path_of(id);
  const FileReader reader = open_blob(path, id, root_);
  std::string bytes(size_t(reader.size()), '\0');
  reader.read_at(0, bytes.data(), bytes.size());
  const std::string actual = sha256_hex(bytes);
  if (actual != id) throw_corrupt(id, path, bytes.size(), actual);
  return bytes;
}

DecodedRevision BlobStore::get_revision(std::string_view id, const std::string& source) const {
  const fs::path path = path_of(id);
  const FileReader reader = open_blob(path, id, root_);
  Sha256 digest;
  DecodedRevision out;
  try {
    out = read_revision_file(reader, source, &digest);
  } catch (const Error& e) {
    // A blob that fails to decode: damaged bytes (data_loss, as get() reports them) or an
    // intact blob that is no revision (the decoder's own error).
    const std::string actual = file_sha256_hex(reader);
    if (actual != id) throw_corrupt(id, path, reader.size(), actual);
    throw;
  }
  const std::string actual = digest.finish_hex();
  if (actual != id) throw_corrupt(id, path, reader.size(), actual);
  return out;
}

bool BlobStore::exists(std::string_view id) const {
  return size_of(id).has_value();
}

std::optional<uint64_t> BlobStore::size_of(std::string_view id) const {
  const fs::path path = path_of(id);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    SPINDLE_CHECK(errno == ENOENT, io, "blob store: cannot stat {}: {}", path.string(),
                  std::strerror(errno));
    return std::nullopt;
  }
  return uint64_t(st.st_size);
}

std::optional<uint64_t> BlobStore::remove(std::string_view id) const {
  const fs::path path = path_of(id);
  const StoreLock lock(root_, LOCK_EX);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    SPINDLE_CHECK(errno == ENOENT, io, "blob store: cannot stat {}: {}", path.string(),
                  std::strerror(errno));
    return std::nullopt;
  }
  if (::unlink(path.c_str()) != 0) {
    SPINDLE_CHECK(errno == ENOENT, io, "blob store: cannot delete {}: {}", path.string(),
                  std::strerror(errno));
    return std::nullopt;
  }
  return uint64_t(st.st_size);
}

BlobGcReport BlobStore::gc(const std::function<bool(std::string_view id)>& is_referenced,
                           const BlobGcOptions& options) const {
  SPINDLE_CHECK(options.grace.count() >= 0, invalid_argument,
                "blob gc: grace must be >= 0 seconds, got {}", options.grace.count());
  const int64_t cutoff_ns = filesystem_now_ns(root_) - int64_t(options.grace.count()) * 1000000000;
  BlobGcReport report;

  std::vector<fs::path> fanouts;
  for (const auto& entry : fs::directory_iterator(root_)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && is_fanout_name(name)) {
      fanouts.push_back(entry.path());
    } else if (name.starts_with('.') && name.find(".tmp-") != std::string::npos) {
      struct stat st {};  // a put_stream's temp file, left by a crash (or still being written)
      if (::stat(entry.path().c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          to_ns(st.st_mtim) < cutoff_ns && ::unlink(entry.path().c_str()) == 0) {
        ++report.temp_removed;
      }
    }
  }
  for (const fs::path& dir : fanouts) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.push_back(entry.path().filename().string());
    }
    const std::string prefix = dir.filename().string();
    auto batch = [&] {
      for (const std::string& name : names) {
        const fs::path path = dir / name;
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) continue;  // vanished meanwhile
        const bool old = to_ns(st.st_mtim) < cutoff_ns;
        if (name.starts_with('.') && name.find(".tmp-") != std::string::npos) {
          if (old && ::unlink(path.c_str()) == 0) ++report.temp_removed;
          continue;
        }
        if (!is_sha256_hex(name) || !name.starts_with(prefix) || !S_ISREG(st.st_mode)) {
          ++report.foreign;
          continue;
        }
        ++report.scanned;
        if (!old) {
          ++report.young;
          continue;
        }
        if (is_referenced(name)) {
          ++report.referenced;
          continue;
        }
        const StoreLock lock(root_, LOCK_EX);
        // Re-check under the lock: a put() may have refreshed it since the stat above.
        if (::stat(path.c_str(), &st) != 0 || to_ns(st.st_mtim) >= cutoff_ns) {
          ++report.young;
          continue;
        }
        if (::unlink(path.c_str()) == 0) {
          ++report.deleted;
          report.bytes_freed += uint64_t(st.st_size);
        }
      }
    };
    if (options.run_batch) {
      options.run_batch(batch);
    } else {
      batch();
    }
  }
  return report;
}

}  // namespace spindle::adapters
