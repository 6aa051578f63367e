#include "heap_trim.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace spindle::service {
namespace {

int64_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? int64_t(resident) * int64_t(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

HeapTrim trim_heap() {
  HeapTrim t;
  t.rss_before = rss_bytes();
  const auto start = std::chrono::steady_clock::now();
#if defined(__GLIBC__)
  t.released = malloc_trim(0) != 0;
#endif
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  t.rss_after = rss_bytes();
  return t;
}

}  // namespace spindle::service
