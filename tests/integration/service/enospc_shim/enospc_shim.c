/* A disk that fills up, for tests that cannot mount a small filesystem (not root): LD_PRELOAD
 * this into spindled and it answers ENOSPC, like a full disk, for writes to regular files under
 * one directory once a byte budget is spent.
 *
 *   SPINDLE_ENOSPC_DIR      the directory (absolute, no trailing slash); files below it count
 *   SPINDLE_ENOSPC_CONTROL  a file holding the budget in bytes (decimal). Absent: no limit.
 *                           Rewriting it (new size, mtime or inode) starts a new budget, so a
 *                           test "fills" the disk by writing "0" and "frees" it by deleting
 *                           the file, while the daemon runs.
 *
 * write, pwrite, pwrite64 and writev write what is left of the budget (a short write, as a
 * real filesystem does when it runs out mid-call), then fail with ENOSPC. fsync and fdatasync
 * of such a file fail with ENOSPC while the budget is spent (delayed allocation running out at
 * writeback). Everything else, and every other file, passes through. Thread-safe (one mutex).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);
typedef int (*fsync_fn)(int);

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct stat g_control; /* the control file as last read */
static int g_have_control = 0;
static unsigned long long g_budget = 0, g_used = 0;

static void* next(const char* name) {
  return dlsym(RTLD_NEXT, name);
}

/* Whether fd is a regular file under SPINDLE_ENOSPC_DIR. */
static int watched(int fd) {
  const char* dir = getenv("SPINDLE_ENOSPC_DIR");
  if (!dir || !*dir) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  char link[64], target[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return 0;
  target[n] = '\0';
  const size_t len = strlen(dir);
  return strncmp(target, dir, len) == 0 && target[len] == '/';
}

/* Re-reads the control file when it changed. Returns 1 when a budget applies. Under g_mutex. */
static int refresh_budget(void) {
  const char* path = getenv("SPINDLE_ENOSPC_CONTROL");
  struct stat st;
  if (!path || stat(path, &st) != 0) {
    g_have_control = 0;
    return 0;
  }
  if (!g_have_control || st.st_ino != g_control.st_ino || st.st_size != g_control.st_size ||
      st.st_mtim.tv_sec != g_control.st_mtim.tv_sec ||
      st.st_mtim.tv_nsec != g_control.st_mtim.tv_nsec) {
    FILE* f = fopen(path, "r");
    unsigned long long budget = 0;
    if (f) {
      if (fscanf(f, "%llu", &budget) != 1) budget = 0;
      fclose(f);
    }
    g_control = st;
    g_have_control = 1;
    g_budget = budget;
    g_used = 0;
  }
  return 1;
}

/* How many of n bytes may be written to fd now: n when unlimited, else what is left. */
static size_t allowance(int fd, size_t n) {
  if (!watched(fd)) return n;
  pthread_mutex_lock(&g_mutex);
  size_t allowed = n;
  if (refresh_budget()) {
    const unsigned long long left = g_used < g_budget ? g_budget - g_used : 0;
    if (allowed > left) allowed = (size_t)left;
    g_used += allowed;
  }
  pthread_mutex_unlock(&g_mutex);
  return allowed;
}

static int spent(int fd) {
  if (!watched(fd)) return 0;
  pthread_mutex_lock(&g_mutex);
  const int out = refresh_budget() && g_used >= g_budget;
  pthread_mutex_unlock(&g_mutex);
  return out;
}

ssize_t write(int fd, const void* buf, size_t n) {
  static write_fn real;
  if (!real) real = (write_fn)next("write");
  const size_t allowed = n ? allowance(fd, n) : 0;
  if (n && allowed == 0) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, allowed);
}

static ssize_t pwrite_common(const char* name, pwrite_fn* real, int fd, const void* buf, size_t n,
                             off_t off) {
  if (!*real) *real = (pwrite_fn)next(name);
  const size_t allowed = n ? allowance(fd, n) : 0;
  if (n && allowed == 0) {
    errno = ENOSPC;
    return -1;
  }
  return (*real)(fd, buf, allowed, off);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  static pwrite_fn real;
  return pwrite_common("pwrite", &real, fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  static pwrite_fn real;
  return pwrite_common("pwrite64", &real, fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  static writev_fn real;
  if (!real) real = (writev_fn)next("writev");
  size_t n = 0;
  for (int i = 0; i < count; ++i) n += iov[i].iov_len;
  const size_t allowed = n ? allowance(fd, n) : 0;
  if (allowed == n) return real(fd, iov, count);
  if (allowed == 0) {
    errno = ENOSPC;
    return -1;
  }
  /* A short write: the first `allowed` bytes, through write(2) of the real library. */
  static write_fn real_write;
  if (!real_write) real_write = (write_fn)next("write");
  size_t done = 0;
  for (int i = 0; i < count && done < allowed; ++i) {
    size_t take = iov[i].iov_len;
    if (take > allowed - done) take = allowed - done;
    const ssize_t w = real_write(fd, iov[i].iov_base, take);
    if (w < 0) return done ? (ssize_t)done : -1;
    done += (size_t)w;
    if ((size_t)w < take) break;
  }
  return (ssize_t)done;
}

int fsync(int fd) {
  static fsync_fn real;
  if (!real) real = (fsync_fn)next("fsync");
  if (spent(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd);
}

int fdatasync(int fd) {
  static fsync_fn real;
  if (!real) real = (fsync_fn)next("fdatasync");
  if (spent(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd);
}
