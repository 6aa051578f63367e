// SGMV LoRA forward on the GPU: shrink (h = x·A_sᵀ) and expand (y += c_s·h·B_sᵀ), one launch for
// all segments of a call. Both are row kernels (see lora_common.cuh): decode batches of one-row
// segments with distinct adapters and long prefill segments take the same path; A_s and B_s
// rows are re-read per row from L2, which holds a slot's weights for the rows that share it.

#include <cstdint>

#include "lora_common.cuh"

namespace spindle::kernels::cuda {
namespace {

using namespace lora_detail;

// Shrink: a block per (row, slice of 16 rank rows); 8 warps, each warp owns 2 rank rows and
// reduces dot(A_s[i, :], x[t, :]) over its lanes. x is staged in shared memory in chunks, so it
// is read from global memory once per slice.
constexpr int kShrinkThreads = 256;
constexpr int kShrinkWarps = kShrinkThreads / 32;
constexpr int kShrinkRanksPerWarp = 2;
constexpr int kShrinkRanksPerBlock = kShrinkWarps * kShrinkRanksPerWarp;
constexpr int kShrinkChunk = 4096;  // floats of x per pass (16 KiB)

// Expand: a block per (row, tile of 128 output columns); thread j computes one output from the
// row's h (shared memory) and B_s[j, 0:r] (its own contiguous row, L1-cached across the loop).
constexpr int kExpandThreads = 128;

// kVec: d_in % 4 == 0 and A 16-byte aligned, so A rows and x chunks are read as float4.
template <class T, bool kVec>
__global__ void __launch_bounds__(kShrinkThreads)
    lora_shrink_kernel(const T* x, int64_t ld_x, DeviceLoraSlots slots, DeviceSegments segs,
                       float* h) {
  const int64_t t = blockIdx.x;
  const RowAdapter ad = row_adapter(slots, segs, t);
  const int r0 = static_cast<int>(blockIdx.y) * kShrinkRanksPerBlock;
  if (r0 >= ad.rank) return;  // also rows in no segment, base-only and rank-0 rows

  __shared__ __align__(16) float xs[kShrinkChunk];
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t d_in = slots.d_in;
  const float* A_s = slots.A + int64_t{ad.slot} * slots.max_rank * d_in;
  const T* x_t = x + t * ld_x;

  float acc[kShrinkRanksPerWarp] = {};
  for (int64_t c0 = 0; c0 < d_in; c0 += kShrinkChunk) {
    const int n = static_cast<int>(d_in - c0 < kShrinkChunk ? d_in - c0 : kShrinkChunk);
    __syncthreads();  // the previous chunk is consumed
    for (int k = static_cast<int>(threadIdx.x); k < n; k += kShrinkThreads) {
      xs[k] = load_f32(x_t + c0 + k);
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kShrinkRanksPerWarp; ++q) {
      const int i = r0 + warp + kShrinkWarps * q;
      if (i >= ad.rank) continue;
      const float* a = A_s + int64_t{i} * d_in + c0;
      float s = 0.0f;
      if constexpr (kVec) {
        const auto* a4 = reinterpret_cast<const float4*>(a);
        const auto* x4 = reinterpret_cast<const float4*>(xs);
#pragma unroll 4
        for (int k = lane; k < n / 4; k += 32) {
          const float4 av = a4[k];
          const float4 xv = x4[k];
          s += av.x * xv.x + av.y * xv.y + av.z * xv.z + av.w * xv.w;
        }
      } else {
#pragma unroll 4
        for (int k = lane; k < n; k += 32) s += a[k] * xs[k];
      }
      acc[q] += s;
    }
  }
#pragma unroll
  for (int q = 0; q < kShrinkRanksPerWarp; ++q) {
    const float v = warp_sum(acc[q]);
    const int i = r0 + warp + kShrinkWarps * q;
    if (lane == 0 && i < ad.rank) h[t * slots.max_rank + i] = v;
  }
}

// kVec: max_rank % 4 == 0 and B 16-byte aligned, so B rows are read as float4.
template <class T, bool kVec>
__global__ void __launch_bounds__(kExpandThreads)
    lora_expand_kernel(const float* h, DeviceLoraSlots slots, DeviceSegments segs, T* y,
                       int64_t ld_y, int64_t col_offset) {
  const int64_t t = blockIdx.x;
  const RowAdapter ad = row_adapter(slots, segs, t);
  if (ad.rank == 0) return;

  __shared__ __align__(16) float hs[kMaxRank];
  const int64_t max_rank = slots.max_rank;
  for (int i = static_cast<int>(threadIdx.x); i < ad.rank; i += kExpandThreads) {
    hs[i] = h[t * max_rank + i];
  }
  __syncthreads();
  const int64_t j = int64_t{blockIdx.y} * kExpandThreads + threadIdx.x;
  if (j >= slots.d_out) return;

  const float* b = slots.B + (int64_t{ad.slot} * slots.d_out + j) * max_rank;
  float s = 0.0f;
  int i = 0;
  if constexpr (kVec) {
    const auto* b4 = reinterpret_cast<const float4*>(b);
    const auto* h4 = reinterpret_cast<const float4*>(hs);
    for (; i + 4 <= ad.rank; i += 4) {
      const float4 bv = b4[i / 4];
      const float4 hv = h4[i / 4];
      s += bv.x * hv.x + bv.y * hv.y + bv.z * hv.z + bv.w * hv.w;
    }
  }
  for (; i < ad.rank; ++i) s += b[i] * hs[i];
  T* yp = y + t * ld_y + col_offset + j;
  store_f32(yp, load_f32(yp) + slots.scale[ad.slot] * s);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

template <class T>
void lora_shrink(const T* x, int64_t ld_x, const DeviceLoraSlots& slots, DeviceSegments segments,
                 float* h, cudaStream_t stream) {
  constexpr const char* kName = "cuda::lora_shrink";
  check_common(slots, segments, kName);
  SPINDLE_KERNEL_REQUIRE(ld_x >= slots.d_in, kName, "ld_x >= d_in");
  if (!has_work(segments)) return;
  SPINDLE_KERNEL_REQUIRE(
      x != nullptr && h != nullptr && slots.A != nullptr && slots.rank != nullptr, kName,
      "x, h, slots.A and slots.rank must be non-null");
  const dim3 grid(
      static_cast<unsigned>(segments.rows),
      static_cast<unsigned>((slots.max_rank + kShrinkRanksPerBlock - 1) / kShrinkRanksPerBlock));
  if (slots.d_in % 4 == 0 && aligned16(slots.A)) {
    lora_shrink_kernel<T, true><<<grid, kShrinkThreads, 0, stream>>>(x, ld_x, slots, segments, h);
  } else {
    lora_shrink_kernel<T, false><<<grid, kShrinkThreads, 0, stream>>>(x, ld_x, slots, segments, h);
  }
  check_launch("lora_shrink_kernel");
}

template <class T>
void lora_expand(const float* h, const DeviceLoraSlots& slots, DeviceSegments segments, T* y,
                 int64_t ld_y, int64_t col_offset, cudaStream_t stream) {
  constexpr const char* kName = "cuda::lora_expand";
  check_common(slots, segments, kName);
  SPINDLE_KERNEL_REQUIRE(col_offset >= 0 && ld_y >= col_offset + slots.d_out, kName,
                         "col_offset >= 0 and ld_y >= col_offset + d_out");
  if (!has_work(segments)) return;
  SPINDLE_KERNEL_REQUIRE(h != nullptr && y != nullptr && slots.B != nullptr &&
                             slots.rank != nullptr && slots.scale != nullptr,
                         kName, "h, y, slots.B, slots.rank and slots.scale must be non-null");
  const dim3 grid(static_cast<unsigned>(segments.rows),
                  static_cast<unsigned>((slots.d_out + kExpandThreads - 1) / kExpandThreads));
  if (slots.max_rank % 4 == 0 && aligned16(slots.B)) {
    lora_expand_kernel<T, true>
        <<<grid, kExpandThreads, 0, stream>>>(h, slots, segments, y, ld_y, col_offset);
  } else {
    lora_expand_kernel<T, false>
        <<<grid, kExpandThreads, 0, stream>>>(h, slots, segments, y, ld_y, col_offset);
  }
  check_launch("lora_expand_kernel");
}

template void lora_shrink<float>(const float*, int64_t, const DeviceLoraSlots&, DeviceSegments,
                                 float*, cudaStream_t);
template void lora_shrink<bf16>(const bf16*, int64_t, const DeviceLoraSlots&, DeviceSegments,
                                float*, cudaStream_t);
template void lora_expand<float>(const float*, const DeviceLoraSlots&, DeviceSegments, float*,
                                 int64_t, int64_t, cudaStream_t);
template void lora_expand<bf16>(const float*, const DeviceLoraSlots&, DeviceSegments, bf16*,
                                int64_t, int64_t, cudaStream_t);

}  // namespace spindle::kernels::cuda
