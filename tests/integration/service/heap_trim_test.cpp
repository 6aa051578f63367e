// trim_heap (backend/service/src/heap_trim.h): memory freed in the middle of a malloc arena stays
// in RSS until malloc_trim hands its pages back; spindled does that every --heap-trim-s.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../../backend/service/src/heap_trim.h"

namespace spindle::service {
namespace {

TEST(HeapTrim, FreedPagesInsideTheHeapGoBackToTheKernel) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__GLIBC__)
  GTEST_SKIP() << "the sanitizer's allocator (or a non-glibc C library) owns the heap here";
#else
  // 64 KiB blocks stay below glibc's mmap threshold, so they live in an arena; the last one
  // stays allocated, so free() cannot give the memory back by shrinking the arena's top.
  constexpr size_t kBlock = 64 << 10, kBlocks = 1024;  // 64 MiB
  std::vector<void*> blocks;
  blocks.reserve(kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) {
    void* p = std::malloc(kBlock);
    ASSERT_NE(p, nullptr);
    std::memset(p, int(i), kBlock);
    blocks.push_back(p);
  }
  for (size_t i = 0; i + 1 < kBlocks; ++i) std::free(blocks[i]);
  const HeapTrim t = trim_heap();
  std::free(blocks.back());
  ASSERT_GT(t.rss_before, 0) << "/proc/self/statm unreadable";
  std::printf("heap trim: rss %.1f -> %.1f MiB in %.2f ms\n", double(t.rss_before) / 1048576.0,
              double(t.rss_after) / 1048576.0, 1e3 * t.seconds);
  EXPECT_TRUE(t.released);
  // At least half of the 64 MiB freed leaves the process.
  EXPECT_GT(t.rss_before - t.rss_after, int64_t(kBlock * kBlocks / 2))
      << "rss " << t.rss_before << " -> " << t.rss_after;
#endif
}

}  // namespace
}  // namespace spindle::service
