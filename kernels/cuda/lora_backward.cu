// SGMV LoRA backward on the GPU (semantics: kernels/lora.h).
//   expand backward: dh rows (row kernel), then dB per slot (segment-owned reduction);
//   shrink backward: dA per slot (segment-owned reduction), then dx rows (row kernel).
// The weight gradients are reduced by one block per (slot, column tile) in a fixed order, so
// results are deterministic (no atomics) and dA/dB accumulate into what the caller holds.

#include <cstdint>

#include "lora_common.cuh"

namespace spindle::kernels::cuda {
namespace {

using namespace lora_detail;

// dh: a block per row; warp w takes output columns j = w, w + 8, ... and its lanes the rank
// index i = lane + 32q, so B_s[j, 0:r] is read coalesced; the 8 warp partials are summed in
// shared memory in a fixed order.
constexpr int kDhThreads = 256;
constexpr int kDhWarps = kDhThreads / 32;
constexpr int kRankPerLane = kMaxRank / 32;

// Weight gradients: a block per (segment, tile of 32 columns of the long dimension), rows staged
// 16 at a time; each thread owns up to 16 elements of the [32, rank] (dB) or [rank, 32] (dA)
// tile in registers.
constexpr int kGradThreads = 256;
constexpr int kGradTile = 32;
constexpr int kGradRows = 16;
constexpr int kGradPerThread = kGradTile * kMaxRank / kGradThreads;

// dx: a block per (row, tile of 256 input columns); thread k sums dh[t, i]·A_s[i, k] over i,
// reading A_s rows coalesced.
constexpr int kDxThreads = 256;

template <class T>
__global__ void __launch_bounds__(kDhThreads)
    lora_dh_kernel(const T* dy, int64_t ld_dy, int64_t col_offset, DeviceLoraSlots slots,
                   DeviceSegments segs, float* dh) {
  const int64_t t = blockIdx.x;
  const RowAdapter ad = row_adapter(slots, segs, t);
  if (ad.rank == 0) return;

  __shared__ float part[kDhWarps][kMaxRank];
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t max_rank = slots.max_rank;
  const float* B_s = slots.B + int64_t{ad.slot} * slots.d_out * max_rank;
  const T* dy_t = dy + t * ld_dy + col_offset;

  float acc[kRankPerLane] = {};
#pragma unroll 2
  for (int64_t j = warp; j < slots.d_out; j += kDhWarps) {
    const float g = load_f32(dy_t + j);
    const float* b = B_s + j * max_rank;
#pragma unroll
    for (int q = 0; q < kRankPerLane; ++q) {
      const int i = lane + 32 * q;
      if (i < ad.rank) acc[q] += g * b[i];
    }
  }
#pragma unroll
  for (int q = 0; q < kRankPerLane; ++q) part[warp][lane + 32 * q] = acc[q];
  __syncthreads();
  const float scale = slots.scale[ad.slot];
  for (int i = static_cast<int>(threadIdx.x); i < ad.rank; i += kDhThreads) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kDhWarps; ++w) s += part[w][i];
    dh[t * max_rank + i] = scale * s;
  }
}

// dB_s[j, i] += c_s · Σ_t dy[t, off + j] · h[t, i] over every segment of the slot.
template <class T>
__global__ void __launch_bounds__(kGradThreads)
    lora_db_kernel(const float* h, const T* dy, int64_t ld_dy, int64_t col_offset,
                   DeviceLoraSlots slots, DeviceSegments segs, float* dB) {
  const int g = static_cast<int>(blockIdx.x);
  const LoraSegment seg = segs.data[g];
  if (seg.slot < 0 || seg.row_end <= seg.row_begin) return;
  const int rank = slot_rank(slots, seg.slot);
  if (rank == 0) return;
  if (!owns_slot(segs, g, seg.slot)) return;

  __shared__ float hs[kGradRows][kMaxRank];
  __shared__ float gs[kGradRows][kGradTile];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t max_rank = slots.max_rank;
  const int64_t j0 = int64_t{blockIdx.y} * kGradTile;
  const int jt = static_cast<int>(slots.d_out - j0 < kGradTile ? slots.d_out - j0 : kGradTile);
  const int n_el = jt * rank;
  int pj[kGradPerThread];
  int pi[kGradPerThread];
  float acc[kGradPerThread] = {};
#pragma unroll
  for (int k = 0; k < kGradPerThread; ++k) {
    const int e = tid + k * kGradThreads;
    pj[k] = e / rank;
    pi[k] = e % rank;
  }

  for (int g2 = g; g2 < segs.count; ++g2) {
    const LoraSegment s2 = segs.data[g2];
    if (s2.slot != seg.slot) continue;
    for (int64_t t0 = s2.row_begin; t0 < s2.row_end; t0 += kGradRows) {
      const int nr = static_cast<int>(s2.row_end - t0 < kGradRows ? s2.row_end - t0 : kGradRows);
      __syncthreads();  // the previous rows are consumed
      for (int e = tid; e < nr * rank; e += kGradThreads) {
        hs[e / rank][e % rank] = h[(t0 + e / rank) * max_rank + e % rank];
      }
      for (int e = tid; e < nr * jt; e += kGradThreads) {
        gs[e / jt][e % jt] = load_f32(dy + (t0 + e / jt) * ld_dy + col_offset + j0 + e % jt);
      }
      __syncthreads();
      for (int r = 0; r < nr; ++r) {
#pragma unroll
        for (int k = 0; k < kGradPerThread; ++k) {
          if (tid + k * kGradThreads < n_el) acc[k] += gs[r][pj[k]] * hs[r][pi[k]];
        }
      }
    }
  }
  const float scale = slots.scale[seg.slot];
  float* dB_s = dB + int64_t{seg.slot} * slots.d_out * max_rank;
#pragma unroll
  for (int k = 0; k < kGradPerThread; ++k) {
    if (tid + k * kGradThreads < n_el) dB_s[(j0 + pj[k]) * max_rank + pi[k]] += scale * acc[k];
  }
}

// dA_s[i, k] += Σ_t dh[t, i] · x[t, k] over every segment of the slot.
template <class T>
__global__ void __launch_bounds__(kGradThreads)
    lora_da_kernel(const T* x, int64_t ld_x, const float* dh, DeviceLoraSlots slots,
                   DeviceSegments segs, float* dA) {
  const int g = static_cast<int>(blockIdx.x);
  const LoraSegment seg = segs.data[g];
  if (seg.slot < 0 || seg.row_end <= seg.row_begin) return;
  const int rank = slot_rank(slots, seg.slot);
  if (rank == 0) return;
  if (!owns_slot(segs, g, seg.slot)) return;

  __shared__ float ds[kGradRows][kMaxRank];
  __shared__ float xs[kGradRows][kGradTile];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t max_rank = slots.max_rank;
  const int64_t d_in = slots.d_in;
  const int64_t k0 = int64_t{blockIdx.y} * kGradTile;
  const int kt = static_cast<int>(d_in - k0 < kGradTile ? d_in - k0 : kGradTile);
  const int n_el = rank * kt;
  int pi[kGradPerThread];
  int pk[kGradPerThread];
  float acc[kGradPerThread] = {};
#pragma unroll
  for (int k = 0; k < kGradPerThread; ++k) {
    const int e = tid + k * kGradThreads;
    pi[k] = e / kt;
    pk[k] = e % kt;
  }

  for (int g2 = g; g2 < segs.count; ++g2) {
    const LoraSegment s2 = segs.data[g2];
    if (s2.slot != seg.slot) continue;
    for (int64_t t0 = s2.row_begin; t0 < s2.row_end; t0 += kGradRows) {
      const int nr = static_cast<int>(s2.row_end - t0 < kGradRows ? s2.row_end - t0 : kGradRows);
      __syncthreads();  // the previous rows are consumed
      for (int e = tid; e < nr * rank; e += kGradThreads) {
        ds[e / rank][e % rank] = dh[(t0 + e / rank) * max_rank + e % rank];
      }
      for (int e = tid; e < nr * kt; e += kGradThreads) {
        xs[e / kt][e % kt] = load_f32(x + (t0 + e / kt) * ld_x + k0 + e % kt);
      }
      __syncthreads();
      for (int r = 0; r < nr; ++r) {
#pragma unroll
        for (int k = 0; k < kGradPerThread; ++k) {
          if (tid + k * kGradThreads < n_el) acc[k] += ds[r][pi[k]] * xs[r][pk[k]];
        }
      }
    }
  }
  float* dA_s = dA + int64_t{seg.slot} * max_rank * d_in;
#pragma unroll
  for (int k = 0; k < kGradPerThread; ++k) {
    if (tid + k * kGradThreads < n_el) dA_s[pi[k] * d_in + k0 + pk[k]] += acc[k];
  }
}

template <class T>
__global__ void __launch_bounds__(kDxThreads)
    lora_dx_kernel(const float* dh, DeviceLoraSlots slots, DeviceSegments segs, T* dx,
                   int64_t ld_dx) {
  const int64_t t = blockIdx.x;
  const RowAdapter ad = row_adapter(slots, segs, t);
  if (ad.rank == 0) return;

  __shared__ float ds[kMaxRank];
  const int64_t max_rank = slots.max_rank;
  for (int i = static_cast<int>(threadIdx.x); i < ad.rank; i += kDxThreads) {
    ds[i] = dh[t * max_rank + i];
  }
  __syncthreads();
  const int64_t d_in = slots.d_in;
  const int64_t k = int64_t{blockIdx.y} * kDxThreads + threadIdx.x;
  if (k >= d_in) return;
  const float* a = slots.A + int64_t{ad.slot} * max_rank * d_in + k;
  float s = 0.0f;
#pragma unroll 4
  for (int i = 0; i < ad.rank; ++i) s += ds[i] * a[i * d_in];
  T* p = dx + t * ld_dx + k;
  store_f32(p, load_f32(p) + s);
}

unsigned tiles(int64_t n, int64_t tile) {
  return static_cast<unsigned>((n + tile - 1) / tile);
}

}  // namespace

template <class T>
void lora_expand_backward(const float* h, const T* dy, int64_t ld_dy, int64_t col_offset,
                          const DeviceLoraSlots& slots, DeviceSegments segments, float* dh,
                          float* dB, cudaStream_t stream) {
  constexpr const char* kName = "cuda::lora_expand_backward";
  check_common(slots, segments, kName);
  SPINDLE_KERNEL_REQUIRE(col_offset >= 0 && ld_dy >= col_offset + slots.d_out, kName,
                         "col_offset >= 0 and ld_dy >= col_offset + d_out");
  if (!has_work(segments)) return;
  SPINDLE_KERNEL_REQUIRE(h != nullptr && dy != nullptr && dh != nullptr && dB != nullptr, kName,
                         "h, dy, dh and dB must be non-null");
  SPINDLE_KERNEL_REQUIRE(slots.B != nullptr && slots.rank != nullptr && slots.scale != nullptr,
                         kName, "slots.B, slots.rank and slots.scale must be non-null");
  lora_dh_kernel<T><<<static_cast<unsigned>(segments.rows), kDhThreads, 0, stream>>>(
      dy, ld_dy, col_offset, slots, segments, dh);
  check_launch("lora_dh_kernel");
  const dim3 grid(static_cast<unsigned>(segments.count), tiles(slots.d_out, kGradTile));
  lora_db_kernel<T>
      <<<grid, kGradThreads, 0, stream>>>(h, dy, ld_dy, col_offset, slots, segments, dB);
  check_launch("lora_db_kernel");
}

template <class T>
void lora_shrink_backward(const T* x, int64_t ld_x, const float* dh, const DeviceLoraSlots& slots,
                          DeviceSegments segments, float* dA, T* dx, int64_t ld_dx,
                          cudaStream_t stream) {
  constexpr const char* kName = "cuda::lora_shrink_backward";
  check_common(slots, segments, kName);
  SPINDLE_KERNEL_REQUIRE(ld_x >= slots.d_in, kName, "ld_x >= d_in");
  SPINDLE_KERNEL_REQUIRE(dx == nullptr || ld_dx >= slots.d_in, kName, "ld_dx >= d_in");
  if (!has_work(segments)) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && dh != nullptr && dA != nullptr, kName,
                         "x, dh and dA must be non-null");
  SPINDLE_KERNEL_REQUIRE(slots.A != nullptr && slots.rank != nullptr, kName,
                         "slots.A and slots.rank must be non-null");
  const dim3 grid(static_cast<unsigned>(segments.count), tiles(slots.d_in, kGradTile));
  lora_da_kernel<T><<<grid, kGradThreads, 0, stream>>>(x, ld_x, dh, slots, segments, dA);
  check_launch("lora_da_kernel");
  if (dx == nullptr) return;
  const dim3 dx_grid(static_cast<unsigned>(segments.rows), tiles(slots.d_in, kDxThreads));
  lora_dx_kernel<T><<<dx_grid, kDxThreads, 0, stream>>>(dh, slots, segments, dx, ld_dx);
  check_launch("lora_dx_kernel");
}

template void lora_expand_backward<float>(const float*, const float*, int64_t, int64_t,
                                          const DeviceLoraSlots&, DeviceSegments, float*, float*,
                                          cudaStream_t);
template void lora_expand_backward<bf16>(const float*, const bf16*, int64_t, int64_t,
                                         const DeviceLoraSlots&, DeviceSegments, float*, float*,
                                         cudaStream_t);
template void lora_shrink_backward<float>(const float*, int64_t, const float*,
                                          const DeviceLoraSlots&, DeviceSegments, float*, float*,
                                          int64_t, cudaStream_t);
template void lora_shrink_backward<bf16>(const bf16*, int64_t, const float*, const DeviceLoraSlots&,
                                         DeviceSegments, float*, bf16*, int64_t, cudaStream_t);

}  // namespace spindle::kernels::cuda
