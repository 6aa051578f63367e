#pragma once
// Device and host helpers shared by the SGMV LoRA kernels (lora.cu, lora_backward.cu).
//
// Row kernels (shrink, expand, dh, dx) launch one block row per row of the call
// (gridDim.x = segments.rows) and find the row's segment by binary search over the device
// segment array; rows in no segment, base-only segments and rank-0 slots return before any
// write. Weight-gradient kernels launch one block per segment and let the first non-empty
// segment of each slot reduce over all of that slot's segments, so no two blocks write the same
// gradient element (deterministic, no atomics).

#include <cuda_bf16.h>

#include <cstdint>

#include "device_common.cuh"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda::lora_detail {

inline constexpr int64_t kMaxRank = 128;

__device__ __forceinline__ float load_f32(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_f32(const bf16* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ void store_f32(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store_f32(bf16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

using detail::warp_sum;

// Index of the segment holding row t, or -1. Segments are in row order and do not overlap, so
// the last segment with row_begin <= t is the only candidate (empty segments before it lose).
// Segment t is tried first: in a decode batch of one-row segments it holds row t, which saves
// the binary search's chain of dependent loads (a segment holding t is the only one).
__device__ __forceinline__ int find_segment(const LoraSegment* segs, int32_t n, int64_t t) {
  if (t < n) {
    const LoraSegment s = segs[t];
    if (s.row_begin <= t && t < s.row_end) return static_cast<int>(t);
  }
  int lo = 0;
  int hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (segs[mid].row_begin <= t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const int g = lo - 1;
  if (g < 0 || t >= segs[g].row_end) return -1;
  return g;
}

// Rank of `slot`, clamped to [0, max_rank] so a caller's out-of-range rank cannot index past
// the kMaxRank shared buffers.
__device__ __forceinline__ int32_t slot_rank(const DeviceLoraSlots& slots, int32_t slot) {
  const int32_t rank = slots.rank[slot];
  return rank < 0 ? 0 : (rank > slots.max_rank ? static_cast<int32_t>(slots.max_rank) : rank);
}

// The adapter of row t: slot and rank, or rank 0 when the row is not adapted.
struct RowAdapter {
  int32_t slot = -1;
  int32_t rank = 0;
};

__device__ __forceinline__ RowAdapter row_adapter(const DeviceLoraSlots& slots,
                                                  const DeviceSegments& segs, int64_t t) {
  RowAdapter a;
  const int g = find_segment(segs.data, segs.count, t);
  if (g < 0) return a;
  const int32_t slot = segs.data[g].slot;
  if (slot < 0) return a;
  a.slot = slot;
  a.rank = slot_rank(slots, slot);
  return a;
}

// True when segment g is the first non-empty adapted segment of its slot, i.e. the block that
// owns the slot's gradient. Must be called by every thread of the block (it synchronises).
__device__ __forceinline__ bool owns_slot(const DeviceSegments& segs, int g, int32_t slot) {
  bool earlier = false;
  for (int q = static_cast<int>(threadIdx.x); q < g; q += static_cast<int>(blockDim.x)) {
    const LoraSegment s = segs.data[q];
    earlier = earlier || (s.slot == slot && s.row_end > s.row_begin);
  }
  return __syncthreads_or(earlier) == 0;
}

// Host-side checks shared by every entry point (before any launch).
inline void check_common(const DeviceLoraSlots& slots, const DeviceSegments& segs,
                         const char* kernel) {
  SPINDLE_KERNEL_REQUIRE(slots.max_rank >= 1 && slots.max_rank <= kMaxRank, kernel,
                         "max_rank must lie in [1, 128]");
  SPINDLE_KERNEL_REQUIRE(slots.d_in > 0 && slots.d_out > 0 && slots.max_slots >= 0, kernel,
                         "d_in > 0, d_out > 0 and max_slots >= 0");
  SPINDLE_KERNEL_REQUIRE(segs.count >= 0 && segs.rows >= 0, kernel,
                         "segments.count >= 0 and segments.rows >= 0");
  SPINDLE_KERNEL_REQUIRE(segs.rows <= INT32_MAX, kernel, "segments.rows must fit in int32");
  SPINDLE_KERNEL_REQUIRE(segs.count == 0 || segs.data != nullptr, kernel,
                         "segments.data must be non-null");
}

// True when the call has work to launch (some segment and some row).
inline bool has_work(const DeviceSegments& segs) {
  return segs.count > 0 && segs.rows > 0;
}

}  // namespace spindle::kernels::cuda::lora_detail
