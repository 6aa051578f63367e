#pragma once
// Returning freed heap memory to the kernel. glibc's malloc keeps pages that were freed inside
// its arenas (one per thread that allocates, up to 8 per core), so a long-running daemon whose
// socket, catalog, loader and engine threads churn through requests of every size holds more and
// more free memory in RSS. malloc_trim(0) hands every arena's whole free pages back
// (MADV_DONTNEED); the front thread calls it every --heap-trim-s (service.h).

#include <cstdint>

namespace spindle::service {

struct HeapTrim {
  int64_t rss_before = 0;  // bytes, /proc/self/statm (0 where it cannot be read)
  int64_t rss_after = 0;
  bool released = false;   // malloc_trim returned memory to the kernel
  double seconds = 0.0;    // how long malloc_trim took (the caller's thread waits that long)
};

// One malloc_trim(0) over every arena, with the process's RSS around it. A no-op (released =
// false) on a C library without malloc_trim.
HeapTrim trim_heap();

}  // namespace spindle::service
