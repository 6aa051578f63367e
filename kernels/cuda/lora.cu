// SGMV LoRA forward on the GPU: shrink (h = x·A_sᵀ) and expand (y += c_s·h·B_sᵀ), one launch for
// all segments of a call and for up to kLoraMaxTargets targets sharing x (blockIdx.z = target).
// Both are row kernels (see lora_common.cuh): decode batches of one-row segments with distinct
// adapters and long prefill segments take the same path; A_s and B_s rows are re-read per row
// from L2, which holds a slot's weights for the rows that share it. A single-target call is the
// multi-target launch with one target, and no output depends on the other targets of a launch,
// so the multi calls are bitwise the single ones.

#include <algorithm>
#include <cstdint>
#include <span>

#include "lora_common.cuh"

namespace spindle::kernels::cuda {
namespace {

using namespace lora_detail;

constexpr int kMaxTargets = static_cast<int>(kLoraMaxTargets);

// Shrink: a block per (row, slice of 8 rank rows, target); warp w owns rank row
// 8·blockIdx.y + w and reduces dot(A_s[i, :], x[t, :]) over its lanes (16-byte loads of A, x
// read straight from L1/L2: the block's warps share the row).
constexpr int kShrinkWarps = 8;
constexpr int kShrinkThreads = kShrinkWarps * 32;

// Expand: a block per (row, tile of 512 output columns, target); thread k computes columns
// j0 + k + 128·q (q < 4, coalesced y accesses) from the row's h (shared memory) and B_s[j, 0:r]
// (r contiguous floats per column).
constexpr int kExpandThreads = 128;
constexpr int kExpandOuts = 4;
constexpr int kExpandTile = kExpandThreads * kExpandOuts;

template <class T>
struct ShrinkArgs {
  const T* x = nullptr;
  int64_t ld_x = 0;
  DeviceSegments segs;
  DeviceLoraSlots slots[kMaxTargets];
  float* h[kMaxTargets] = {};
  bool vec[kMaxTargets] = {};  // A rows and x rows readable as float4 / 4 x T
};

template <class T>
struct ExpandArgs {
  DeviceSegments segs;
  DeviceLoraSlots slots[kMaxTargets];
  const float* h[kMaxTargets] = {};
  T* y[kMaxTargets] = {};
  int64_t ld_y[kMaxTargets] = {};
  int64_t col_offset[kMaxTargets] = {};
  bool vec[kMaxTargets] = {};  // B rows readable as float4
};

__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
// Four bf16 (8 bytes, little-endian pairs) widened exactly to fp32.
__device__ __forceinline__ float4 load4(const bf16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                     __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}

__device__ __forceinline__ float dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

template <class T>
__global__ void __launch_bounds__(kShrinkThreads)
    lora_shrink_kernel(const __grid_constant__ ShrinkArgs<T> a) {
  const int z = static_cast<int>(blockIdx.z);
  const DeviceLoraSlots& slots = a.slots[z];
  const int r0 = static_cast<int>(blockIdx.y) * kShrinkWarps;
  if (r0 >= slots.max_rank) return;  // a slice past this target's max_rank
  const int64_t t = blockIdx.x;
  const RowAdapter ad = row_adapter(slots, a.segs, t);
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int i = r0 + warp;
  if (i >= ad.rank) return;  // also rows in no segment, base-only and rank-0 rows

  const int64_t d_in = slots.d_in;
  const float* A_i = slots.A + (int64_t{ad.slot} * slots.max_rank + i) * d_in;
  const T* x_t = a.x + t * a.ld_x;
  float s = 0.0f;
  if (a.vec[z]) {
    const auto* a4 = reinterpret_cast<const float4*>(A_i);
    const int n4 = static_cast<int>(d_in / 4);
#pragma unroll 4
    for (int k = lane; k < n4; k += 32) s += dot4(__ldg(a4 + k), load4(x_t + 4 * k));
  } else {
#pragma unroll 4
    for (int k = lane; k < static_cast<int>(d_in); k += 32) s += __ldg(A_i + k) * load_f32(x_t + k);
  }
  s = warp_sum(s);
  if (lane == 0) a.h[z][t * slots.max_rank + i] = s;
}

template <class T>
__global__ void __launch_bounds__(kExpandThreads)
    lora_expand_kernel(const __grid_constant__ ExpandArgs<T> a) {
  const int z = static_cast<int>(blockIdx.z);
  const DeviceLoraSlots& slots = a.slots[z];
  const int64_t j0 = int64_t{blockIdx.y} * kExpandTile;
  if (j0 >= slots.d_out) return;  // a tile past this target's d_out
  const int64_t t = blockIdx.x;
  const RowAdapter ad = row_adapter(slots, a.segs, t);
  if (ad.rank == 0) return;  // block-uniform, before the barrier

  __shared__ __align__(16) float hs[kMaxRank];
  const int64_t max_rank = slots.max_rank;
  const float c = slots.scale[ad.slot];
  for (int i = static_cast<int>(threadIdx.x); i < ad.rank; i += kExpandThreads) {
    hs[i] = a.h[z][t * max_rank + i];
  }
  __syncthreads();

  const int64_t d_out = slots.d_out;
  const float* B_s = slots.B + int64_t{ad.slot} * d_out * max_rank;
  const int64_t j_first = j0 + threadIdx.x;
  float acc[kExpandOuts] = {};
  int i0 = 0;
  if (a.vec[z]) {
    const int r4 = ad.rank / 4;
    const auto* h4 = reinterpret_cast<const float4*>(hs);
#pragma unroll 2
    for (int g = 0; g < r4; ++g) {
      const float4 hv = h4[g];
#pragma unroll
      for (int q = 0; q < kExpandOuts; ++q) {
        const int64_t j = j_first + q * kExpandThreads;
        if (j < d_out) {
          acc[q] += dot4(__ldg(reinterpret_cast<const float4*>(B_s + j * max_rank) + g), hv);
        }
      }
    }
    i0 = r4 * 4;
  }
  for (int i = i0; i < ad.rank; ++i) {
    const float hv = hs[i];
#pragma unroll
    for (int q = 0; q < kExpandOuts; ++q) {
      const int64_t j = j_first + q * kExpandThreads;
      if (j < d_out) acc[q] += __ldg(B_s + j * max_rank + i) * hv;
    }
  }
  T* y_t = a.y[z] + t * a.ld_y[z] + a.col_offset[z];
#pragma unroll
  for (int q = 0; q < kExpandOuts; ++q) {
    const int64_t j = j_first + q * kExpandThreads;
    if (j < d_out) store_f32(y_t + j, load_f32(y_t + j) + c * acc[q]);
  }
}

bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Shrink checks of one target (kernel = the entry point's name); null pointers only matter
// when the call has work.
template <class T>
void check_shrink(const T* x, int64_t ld_x, const DeviceLoraSlots& slots, const float* h,
                  const DeviceSegments& segments, const char* kernel) {
  check_common(slots, segments, kernel);
  SPINDLE_KERNEL_REQUIRE(ld_x >= slots.d_in, kernel, "ld_x >= d_in");
  if (!has_work(segments)) return;
  SPINDLE_KERNEL_REQUIRE(
      x != nullptr && h != nullptr && slots.A != nullptr && slots.rank != nullptr, kernel,
      "x, h, slots.A and slots.rank must be non-null");
}

template <class T>
void check_expand(const float* h, const DeviceLoraSlots& slots, const DeviceSegments& segments,
                  const T* y, int64_t ld_y, int64_t col_offset, const char* kernel) {
  check_common(slots, segments, kernel);
  SPINDLE_KERNEL_REQUIRE(col_offset >= 0 && ld_y >= col_offset + slots.d_out, kernel,
                         "col_offset >= 0 and ld_y >= col_offset + d_out");
  SPINDLE_KERNEL_REQUIRE((slots.d_out + kExpandTile - 1) / kExpandTile <= 65535, kernel,
                         "d_out must be at most 65535 * 512");
  if (!has_work(segments)) return;
  SPINDLE_KERNEL_REQUIRE(h != nullptr && y != nullptr && slots.B != nullptr &&
                             slots.rank != nullptr && slots.scale != nullptr,
                         kernel, "h, y, slots.B, slots.rank and slots.scale must be non-null");
}

// Launches after the checks passed and the call has work (targets non-empty, same d_in).
template <class T>
void launch_shrink(const T* x, int64_t ld_x, std::span<const LoraMultiTarget<T>> targets,
                   DeviceSegments segments, cudaStream_t stream) {
  ShrinkArgs<T> args;
  args.x = x;
  args.ld_x = ld_x;
  args.segs = segments;
  const int64_t d_in = targets[0].slots.d_in;
  const bool x_vec = d_in % 4 == 0 && ld_x % 4 == 0 && aligned(x, 4 * sizeof(T));
  int64_t max_rank = 0;
  for (size_t k = 0; k < targets.size(); ++k) {
    args.slots[k] = targets[k].slots;
    args.h[k] = targets[k].h;
    args.vec[k] = x_vec && aligned(targets[k].slots.A, 16);
    max_rank = std::max(max_rank, targets[k].slots.max_rank);
  }
  const dim3 grid(static_cast<unsigned>(segments.rows),
                  static_cast<unsigned>((max_rank + kShrinkWarps - 1) / kShrinkWarps),
                  static_cast<unsigned>(targets.size()));
  lora_shrink_kernel<T><<<grid, kShrinkThreads, 0, stream>>>(args);
  check_launch("lora_shrink_kernel");
}

template <class T>
void launch_expand(std::span<const LoraMultiTarget<T>> targets, DeviceSegments segments,
                   cudaStream_t stream) {
  ExpandArgs<T> args;
  args.segs = segments;
  int64_t d_out = 0;
  for (size_t k = 0; k < targets.size(); ++k) {
    const LoraMultiTarget<T>& tg = targets[k];
    args.slots[k] = tg.slots;
    args.h[k] = tg.h;
    args.y[k] = tg.y;
    args.ld_y[k] = tg.ld_y;
    args.col_offset[k] = tg.col_offset;
    args.vec[k] = tg.slots.max_rank % 4 == 0 && aligned(tg.slots.B, 16);
    d_out = std::max(d_out, tg.slots.d_out);
  }
  const dim3 grid(static_cast<unsigned>(segments.rows),
                  static_cast<unsigned>((d_out + kExpandTile - 1) / kExpandTile),
                  static_cast<unsigned>(targets.size()));
  lora_expand_kernel<T><<<grid, kExpandThreads, 0, stream>>>(args);
  check_launch("lora_expand_kernel");
}

}  // namespace

template <class T>
void lora_shrink(const T* x, int64_t ld_x, const DeviceLoraSlots& slots, DeviceSegments segments,
                 float* h, cudaStream_t stream) {
  check_shrink(x, ld_x, slots, h, segments, "cuda::lora_shrink");
  if (!has_work(segments)) return;
  LoraMultiTarget<T> target;
  target.slots = slots;
  target.h = h;
  launch_shrink<T>(x, ld_x, std::span<const LoraMultiTarget<T>>(&target, 1), segments, stream);
}

template <class T>
void lora_expand(const float* h, const DeviceLoraSlots& slots, DeviceSegments segments, T* y,
                 int64_t ld_y, int64_t col_offset, cudaStream_t stream) {
  check_expand(h, slots, segments, y, ld_y, col_offset, "cuda::lora_expand");
  if (!has_work(segments)) return;
  LoraMultiTarget<T> target{slots, const_cast<float*>(h), y, ld_y, col_offset};
  launch_expand<T>(std::span<const LoraMultiTarget<T>>(&target, 1), segments, stream);
}

template <class T>
void lora_shrink_multi(const T* x, int64_t ld_x, std::span<const LoraMultiTarget<T>> targets,
                       DeviceSegments segments, cudaStream_t stream) {
  constexpr const char* kName = "cuda::lora_shrink_multi";
  SPINDLE_KERNEL_REQUIRE(targets.size() <= kLoraMaxTargets, kName, "at most 3 targets");
  for (const LoraMultiTarget<T>& tg : targets) {
    check_shrink(x, ld_x, tg.slots, tg.h, segments, kName);
    SPINDLE_KERNEL_REQUIRE(tg.slots.d_in == targets[0].slots.d_in, kName,
                           "every target has the same d_in");
  }
  if (targets.empty() || !has_work(segments)) return;
  launch_shrink<T>(x, ld_x, targets, segments, stream);
}

template <class T>
void lora_expand_multi(std::span<const LoraMultiTarget<T>> targets, DeviceSegments segments,
                       cudaStream_t stream) {
  constexpr const char* kName = "cuda::lora_expand_multi";
  SPINDLE_KERNEL_REQUIRE(targets.size() <= kLoraMaxTargets, kName, "at most 3 targets");
  for (const LoraMultiTarget<T>& tg : targets) {
    check_expand(tg.h, tg.slots, segments, tg.y, tg.ld_y, tg.col_offset, kName);
  }
  if (targets.empty() || !has_work(segments)) return;
  launch_expand<T>(targets, segments, stream);
}

template void lora_shrink<float>(const float*, int64_t, const DeviceLoraSlots&, DeviceSegments,
                                 float*, cudaStream_t);
template void lora_shrink<bf16>(const bf16*, int64_t, const DeviceLoraSlots&, DeviceSegments,
                                float*, cudaStream_t);
template void lora_expand<float>(const float*, const DeviceLoraSlots&, DeviceSegments, float*,
                                 int64_t, int64_t, cudaStream_t);
template void lora_expand<bf16>(const float*, const DeviceLoraSlots&, DeviceSegments, bf16*,
                                int64_t, int64_t, cudaStream_t);
template void lora_shrink_multi<float>(const float*, int64_t,
                                       std::span<const LoraMultiTarget<float>>, DeviceSegments,
                                       cudaStream_t);
template void lora_shrink_multi<bf16>(const bf16*, int64_t, std::span<const LoraMultiTarget<bf16>>,
                                      DeviceSegments, cudaStream_t);
template void lora_expand_multi<float>(std::span<const LoraMultiTarget<float>>, DeviceSegments,
                                       cudaStream_t);
template void lora_expand_multi<bf16>(std::span<const LoraMultiTarget<bf16>>, DeviceSegments,
                                      cudaStream_t);

}  // namespace spindle::kernels::cuda
