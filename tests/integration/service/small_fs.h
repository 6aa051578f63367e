#pragma once
// A disk that fills up, for the disk-full tests (issue 16): a size-limited tmpfs mounted by the
// test, or, where mounting is refused (not root, EPERM in a container), the LD_PRELOAD shim of
// enospc_shim/ that answers ENOSPC once a byte budget is spent. Both expose the same three
// moves: fill() (nothing more fits), free_space() (delete what fill() took), and the reason
// when neither is possible (the test skips with it).

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>

namespace spindle::testing {

// A tmpfs of `bytes` at a fresh directory under /tmp; unmounted (lazily) and removed on
// destruction. mount() returns nullopt and sets *why when the kernel refuses.
class SmallFs {
 public:
  static std::optional<SmallFs> mount(uint64_t bytes, const std::string& tag, std::string* why) {
    std::random_device rd;
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("spindle_smallfs_" + tag + "_" + std::to_string(::getpid()) +
                                       "_" + std::to_string(rd()));
    std::filesystem::create_directories(dir);
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      *why = std::string("mount -t tmpfs -o ") + opts + " " + dir.string() + ": " +
             std::strerror(errno);
      std::filesystem::remove(dir);
      return std::nullopt;
    }
    return SmallFs(dir);
  }

  SmallFs(SmallFs&& o) noexcept : dir_(std::move(o.dir_)) { o.dir_.clear(); }
  SmallFs& operator=(SmallFs&& o) noexcept {
    if (this != &o) {
      release();
      dir_ = std::move(o.dir_);
      o.dir_.clear();
    }
    return *this;
  }
  ~SmallFs() { release(); }

  const std::filesystem::path& dir() const { return dir_; }

  uint64_t free_bytes() const {
    struct statvfs s {};
    ::statvfs(dir_.c_str(), &s);
    return uint64_t(s.f_bavail) * s.f_frsize;
  }

  // Writes a filler file until the filesystem is full, but leaves `leave` bytes (rounded down
  // to pages) free. Returns the filler's size.
  uint64_t fill(uint64_t leave = 0) {
    const std::filesystem::path filler = dir_ / "filler";
    const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return 0;
    const std::string chunk(4096, 'f');
    uint64_t wrote = 0;
    while (free_bytes() > leave + chunk.size()) {
      const ssize_t n = ::write(fd, chunk.data(), chunk.size());
      if (n <= 0) break;
      wrote += uint64_t(n);
    }
    if (leave == 0) {
      for (ssize_t n; (n = ::write(fd, chunk.data(), chunk.size())) > 0;) wrote += uint64_t(n);
      for (ssize_t n; (n = ::write(fd, chunk.data(), 1)) > 0;) wrote += uint64_t(n);
    }
    ::close(fd);
    return wrote;
  }

  void free_space() { std::filesystem::remove(dir_ / "filler"); }

 private:
  explicit SmallFs(std::filesystem::path dir) : dir_(std::move(dir)) {}
  void release() {
    if (dir_.empty()) return;
    ::umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }
  std::filesystem::path dir_;
};

// The shim's controls (enospc_shim.c): the daemon started while this object lives gets
// LD_PRELOAD and the two SPINDLE_ENOSPC_* variables; the test's own process is not affected
// (LD_PRELOAD only acts at exec). fill(budget) lets `budget` more bytes through, then ENOSPC.
class EnospcShim {
 public:
  static std::filesystem::path library() {
    if (const char* env = std::getenv("SPINDLE_TEST_ENOSPC_SHIM")) return env;
#ifdef SPINDLE_TEST_ENOSPC_SHIM
    return SPINDLE_TEST_ENOSPC_SHIM;
#else
    return std::filesystem::path(SPINDLE_BINARY_DIR) / "tests" / "libspindle_enospc_shim.so";
#endif
  }

  static std::optional<EnospcShim> attach(const std::filesystem::path& watched_dir,
                                          std::string* why) {
    const std::filesystem::path lib = library();
    if (!std::filesystem::exists(lib)) {
      *why = "ENOSPC shim " + lib.string() +
             " is not built (target spindle_enospc_shim; or set SPINDLE_TEST_ENOSPC_SHIM)";
      return std::nullopt;
    }
    return EnospcShim(lib, watched_dir);
  }

  EnospcShim(EnospcShim&& o) noexcept : control_(std::move(o.control_)), active_(o.active_) {
    o.active_ = false;
  }
  EnospcShim& operator=(EnospcShim&&) = delete;
  ~EnospcShim() {
    if (!active_) return;
    stop_preloading();
    std::error_code ec;
    std::filesystem::remove(control_, ec);
  }

  // Call once the daemon runs: later children (the CLI, a restarted daemon) run without it.
  void stop_preloading() {
    ::unsetenv("LD_PRELOAD");
    ::unsetenv("SPINDLE_ENOSPC_DIR");
    ::unsetenv("SPINDLE_ENOSPC_CONTROL");
  }

  void fill(uint64_t budget = 0) {
    // A new file (new inode) each time, so the shim always sees the change.
    const std::filesystem::path tmp = control_.string() + ".new";
    std::ofstream(tmp) << budget;
    std::filesystem::rename(tmp, control_);
  }
  void free_space() {
    std::error_code ec;
    std::filesystem::remove(control_, ec);
  }

 private:
  EnospcShim(const std::filesystem::path& lib, const std::filesystem::path& dir)
      : control_(std::filesystem::temp_directory_path() /
                 ("spindle_enospc_control_" + std::to_string(::getpid()))),
        active_(true) {
    std::filesystem::remove(control_);
    ::setenv("LD_PRELOAD", lib.c_str(), 1);
    ::setenv("SPINDLE_ENOSPC_DIR", std::filesystem::weakly_canonical(dir).c_str(), 1);
    ::setenv("SPINDLE_ENOSPC_CONTROL", control_.c_str(), 1);
  }
  std::filesystem::path control_;
  bool active_ = false;
};

}  // namespace spindle::testing
