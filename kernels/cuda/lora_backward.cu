// SGMV LoRA backward on the GPU (semantics: kernels/lora.h).
//   expand backward: dh rows (row kernel), then dB per slot (segment-owned reduction);
//   shrink backward: dA per slot (segment-owned reduction), then dx rows (row kernel).
// The weight gradients are reduced by one block per (slot, column tile, row chunk) in a fixed
// order; with more than one row chunk (tall segments, e.g. 2048 training rows) each block writes
// its partial sum to a scratch table and a second kernel adds the chunks in chunk order. Results
// are deterministic (no atomics) and dA/dB accumulate into what the caller holds.
// Training-shaped calls whose adapted segments are all tall run as cuBLAS GEMMs instead (the
// GEMM path at the end of this file; the choice is kernels::plan_lora's, shared with the CPU).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>

#include "lora_common.cuh"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/lora_plan.h"

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

// Row chunks of the weight-gradient reduction: calls over more than kChunkRows rows are split
// into at most kMaxChunks chunks (of a multiple of kGradRows rows), as long as the partial sums
// fit in kMaxPartialFloats floats of scratch.
constexpr int64_t kChunkRows = 128;
constexpr int64_t kMaxChunks = 64;
constexpr int64_t kMaxPartialFloats = int64_t{64} << 20;  // 256 MiB
constexpr int kReduceThreads = 256;

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

// The weight gradients of one (segment, column tile, row chunk) block, one kernel for both:
//   kRankMinor (dB):  dB_s[j, i] += c_s · Σ_t dy[t, off + j] · h[t, i]   dB_s: [d_out, max_rank]
//   !kRankMinor (dA): dA_s[i, k] +=       Σ_t dh[t, i] · x[t, k]          dA_s: [max_rank, d_in]
// over every segment of the slot: `ranks` is the fp32 [rows, max_rank] operand (h or dh),
// `cols` the T operand (dy or x, stride ld_cols, from column col_offset) whose columns the
// grid tiles (d_out or d_in of them). With `partial`, the block writes its unscaled chunk sum
// there ([chunk][segment][the gradient's layout]) for lora_grad_reduce_kernel instead.
template <class T, bool kRankMinor>
__global__ void __launch_bounds__(kGradThreads)
    lora_grad_kernel(const float* ranks, const T* cols, int64_t ld_cols, int64_t col_offset,
                     DeviceLoraSlots slots, DeviceSegments segs, float* grad, int64_t chunk_rows,
                     float* partial) {
  const int g = static_cast<int>(blockIdx.x);
  const LoraSegment seg = segs.data[g];
  if (seg.slot < 0 || seg.row_end <= seg.row_begin) return;
  const int rank = slot_rank(slots, seg.slot);
  if (rank == 0) return;
  if (!owns_slot(segs, g, seg.slot)) return;

  __shared__ float rs[kGradRows][kMaxRank];
  __shared__ float cs[kGradRows][kGradTile];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t max_rank = slots.max_rank;
  const int64_t n_cols = kRankMinor ? slots.d_out : slots.d_in;
  const int64_t c0 = int64_t{blockIdx.y} * kGradTile;
  const int ct = static_cast<int>(n_cols - c0 < kGradTile ? n_cols - c0 : kGradTile);
  const int n_el = ct * rank;
  int pr[kGradPerThread];  // rank index of the thread's k-th element
  int pc[kGradPerThread];  // column index in the tile
  float acc[kGradPerThread] = {};
#pragma unroll
  for (int k = 0; k < kGradPerThread; ++k) {
    const int e = tid + k * kGradThreads;
    pc[k] = kRankMinor ? e / rank : e % ct;
    pr[k] = kRankMinor ? e % rank : e / ct;
  }

  // This block's rows: [row_lo, row_hi) of the call (blockIdx.z-th chunk).
  const int64_t row_lo = int64_t{blockIdx.z} * chunk_rows;
  const int64_t row_hi = row_lo + chunk_rows;
  for (int g2 = g; g2 < segs.count; ++g2) {
    const LoraSegment s2 = segs.data[g2];
    if (s2.slot != seg.slot) continue;
    const int64_t lo = s2.row_begin > row_lo ? s2.row_begin : row_lo;
    const int64_t hi = s2.row_end < row_hi ? s2.row_end : row_hi;
    for (int64_t t0 = lo; t0 < hi; t0 += kGradRows) {
      const int nr = static_cast<int>(hi - t0 < kGradRows ? hi - t0 : kGradRows);
      __syncthreads();  // the previous rows are consumed
      for (int e = tid; e < nr * rank; e += kGradThreads) {
        rs[e / rank][e % rank] = ranks[(t0 + e / rank) * max_rank + e % rank];
      }
      for (int e = tid; e < nr * ct; e += kGradThreads) {
        cs[e / ct][e % ct] = load_f32(cols + (t0 + e / ct) * ld_cols + col_offset + c0 + e % ct);
      }
      __syncthreads();
      for (int r = 0; r < nr; ++r) {
#pragma unroll
        for (int k = 0; k < kGradPerThread; ++k) {
          if (tid + k * kGradThreads < n_el) acc[k] += cs[r][pc[k]] * rs[r][pr[k]];
        }
      }
    }
  }
  // The element's offset in the slot's gradient.
  auto at = [&](int k) {
    return kRankMinor ? (c0 + pc[k]) * max_rank + pr[k] : pr[k] * n_cols + c0 + pc[k];
  };
  const int64_t slot_el = n_cols * max_rank;
  if (partial != nullptr) {
    float* p = partial + (int64_t{blockIdx.z} * segs.count + g) * slot_el;
#pragma unroll
    for (int k = 0; k < kGradPerThread; ++k) {
      if (tid + k * kGradThreads < n_el) p[at(k)] = acc[k];
    }
    return;
  }
  float* grad_s = grad + int64_t{seg.slot} * slot_el;
  if (kRankMinor) {
    const float scale = slots.scale[seg.slot];
#pragma unroll
    for (int k = 0; k < kGradPerThread; ++k) {
      if (tid + k * kGradThreads < n_el) grad_s[at(k)] += scale * acc[k];
    }
  } else {
#pragma unroll
    for (int k = 0; k < kGradPerThread; ++k) {
      if (tid + k * kGradThreads < n_el) grad_s[at(k)] += acc[k];
    }
  }
}

// grad_s[e] += c · Σ_chunk partial[chunk][g][e] in chunk order, for the owning segment g of each
// adapted slot and the elements e of the slot's rank: rank index e % max_rank when rank_minor
// (dB, [d_out, max_rank], c = the slot's scale), e / d_in otherwise (dA, [max_rank, d_in], c = 1).
__global__ void __launch_bounds__(kReduceThreads)
    lora_grad_reduce_kernel(const float* partial, int64_t n_chunks, DeviceLoraSlots slots,
                            DeviceSegments segs, bool rank_minor, float* grad) {
  const int g = static_cast<int>(blockIdx.x);
  const LoraSegment seg = segs.data[g];
  if (seg.slot < 0 || seg.row_end <= seg.row_begin) return;
  const int rank = slot_rank(slots, seg.slot);
  if (rank == 0) return;
  if (!owns_slot(segs, g, seg.slot)) return;
  const int64_t max_rank = slots.max_rank;
  const int64_t n_el = rank_minor ? slots.d_out * max_rank : max_rank * slots.d_in;
  const float scale = rank_minor ? slots.scale[seg.slot] : 1.0f;
  // Grid-stride over the elements: a vocabulary-wide dB (151 936 x 128) has more element tiles
  // than a grid has rows. Each element's chunk order is unchanged.
  for (int64_t e = int64_t{blockIdx.y} * kReduceThreads + threadIdx.x; e < n_el;
       e += int64_t{gridDim.y} * kReduceThreads) {
    const int64_t i = rank_minor ? e % max_rank : e / slots.d_in;
    if (i >= rank) continue;
    float sum = 0.0f;
    for (int64_t c = 0; c < n_chunks; ++c) sum += partial[(c * segs.count + g) * n_el + e];
    grad[int64_t{seg.slot} * n_el + e] += scale * sum;
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

// Rows per chunk of the weight-gradient reduction over `rows` rows (rows itself: one chunk, no
// scratch), for a gradient of n_el floats per segment.
int64_t grad_chunk_rows(const DeviceSegments& segs, int64_t n_el) {
  int64_t n_chunks = (segs.rows + kChunkRows - 1) / kChunkRows;
  if (n_chunks > kMaxChunks) n_chunks = kMaxChunks;
  const int64_t per_chunk = int64_t{segs.count} * n_el;
  if (per_chunk > 0 && n_chunks * per_chunk > kMaxPartialFloats) {
    n_chunks = kMaxPartialFloats / per_chunk;
  }
  if (n_chunks <= 1) return segs.rows;
  int64_t chunk = (segs.rows + n_chunks - 1) / n_chunks;
  return (chunk + kGradRows - 1) / kGradRows * kGradRows;
}

// Floats of partial sums a gradient of n_el floats per segment needs (0: one chunk, none).
int64_t partial_floats(const DeviceSegments& segs, int64_t n_el) {
  if (!has_work(segs)) return 0;
  const int64_t chunk_rows = grad_chunk_rows(segs, n_el);
  const int64_t n_chunks = (segs.rows + chunk_rows - 1) / chunk_rows;
  return n_chunks <= 1 ? 0 : n_chunks * int64_t{segs.count} * n_el;
}

// Launches `grad_kernel(chunk_rows, partial)` over (segments, column tiles, row chunks) and, with
// more than one chunk, the ordered reduction of the partial sums (in the caller's scratch) into
// grad.
template <class Launch>
void launch_grad(const DeviceSegments& segs, const DeviceLoraSlots& slots, int64_t n_el,
                 bool rank_minor, float* grad, void* scratch, size_t scratch_bytes,
                 cudaStream_t stream, const char* kernel, const char* name, Launch&& grad_kernel) {
  const int64_t chunk_rows = grad_chunk_rows(segs, n_el);
  const int64_t n_chunks = (segs.rows + chunk_rows - 1) / chunk_rows;
  if (n_chunks <= 1) {
    grad_kernel(1u, segs.rows, static_cast<float*>(nullptr));
    check_launch(name);
    return;
  }
  const size_t need = static_cast<size_t>(n_chunks * segs.count * n_el) * sizeof(float);
  SPINDLE_KERNEL_REQUIRE(scratch != nullptr && scratch_bytes >= need, kernel,
                         "scratch must hold lora_backward_scratch_bytes(slots, segments) bytes");
  float* partial = static_cast<float*>(scratch);
  grad_kernel(static_cast<unsigned>(n_chunks), chunk_rows, partial);
  check_launch(name);
  const dim3 grid(static_cast<unsigned>(segs.count),
                  std::min(tiles(n_el, kReduceThreads), unsigned{65535}));
  lora_grad_reduce_kernel<<<grid, kReduceThreads, 0, stream>>>(partial, n_chunks, slots, segs,
                                                               rank_minor, grad);
  check_launch("lora_grad_reduce_kernel");
}

// ---- The GEMM path ----------------------------------------------------------------------
// Row-major GEMMs per tall segment (slot s, rank r, scale c, rows [b, b + n)), all fp32:
//   dh[b:b+n, 0:r]  = c · dy_f[b:b+n, :] · B_s[:, 0:r]         (M n, N r, K d_out; beta 0)
//   dB_s[:, 0:r]   += c · dy_f[b:b+n, :]ᵀ · h[b:b+n, 0:r]      (M d_out, N r, K n)
//   dA_s[0:r, :]   +=     dh[b:b+n, 0:r]ᵀ · x_f[b:b+n, :]      (M r, N d_in, K n)
//   dx[b:b+n, :]   +=     dh[b:b+n, 0:r] · A_s[0:r, :]         (M n, N d_in, K r)
// In fp32 mode dy_f / x_f are dy / x themselves and each segment is one GEMM of each kind. In
// bf16 mode a segment runs in row tiles of at most gemm_tile_rows rows: the tile's dy (or x)
// rows are widened to fp32 in the caller's scratch, its products follow, and its dx product
// lands in the same scratch and is added into dx with one rounding, as the dx kernel does (so
// the scratch stays bounded, kWideFloats, even for the unembedding's vocabulary-wide rows).
// Only columns / rows [0, r) of a slot's padded blocks are read or written.

// Scratch bound of the bf16 mode's widened tiles, in floats (64 MiB).
constexpr int64_t kWideFloats = int64_t{16} << 20;

constexpr int kWidenThreads = 256;

// dst[t, j] = src[t, j] as fp32, rows x cols, dst dense (row stride cols).
__global__ void __launch_bounds__(kWidenThreads)
    widen_rows_kernel(const bf16* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst) {
  const int64_t n = rows * cols;
  for (int64_t e = int64_t{blockIdx.x} * kWidenThreads + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * kWidenThreads) {
    const int64_t t = e / cols;
    dst[e] = __bfloat162float(src[t * ld_src + (e - t * cols)]);
  }
}

// dst[t, j] = bf16(dst[t, j] + src[t, j]), rows x cols, src dense (row stride cols).
__global__ void __launch_bounds__(kWidenThreads)
    add_rows_kernel(const float* src, int64_t rows, int64_t cols, bf16* dst, int64_t ld_dst) {
  const int64_t n = rows * cols;
  for (int64_t e = int64_t{blockIdx.x} * kWidenThreads + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * kWidenThreads) {
    const int64_t t = e / cols;
    bf16* p = dst + t * ld_dst + (e - t * cols);
    *p = __float2bfloat16_rn(__bfloat162float(*p) + src[e]);
  }
}

unsigned elementwise_grid(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + kWidenThreads - 1) / kWidenThreads, 1, int64_t{4096}));
}

// The call's tall segments when the GEMM path runs it (see lora.h), else nullopt. Validates the
// host segments against the host rank table (kernels::plan_lora) when they are there.
std::optional<LoraPlan> gemm_plan(const DeviceLoraSlots& slots, const DeviceSegments& segs,
                                  const char* kernel) {
  if (segs.host == nullptr || slots.host_rank == nullptr || slots.host_scale == nullptr ||
      slots.A == nullptr || slots.B == nullptr || !has_work(segs)) {
    return std::nullopt;
  }
  // plan_lora reads only the rank table through a pointer; A and B are checked non-null.
  const LoraSlots host{slots.A,         slots.B,        slots.host_rank, slots.host_scale,
                       slots.max_slots, slots.max_rank, slots.d_in,      slots.d_out};
  LoraPlan plan = plan_lora(host, std::span<const LoraSegment>(segs.host, size_t(segs.count)),
                            LoraPass::expand, kernel);
  if (!plan.rows.empty() || plan.segments.empty()) return std::nullopt;
  const LoraSegmentJob& last = plan.segments.back();
  SPINDLE_KERNEL_REQUIRE(last.row_begin + last.n_rows <= segs.rows, kernel,
                         "segments must end within segments.rows");
  return plan;
}

// Rows per widened tile for rows of `cols` floats (at least kLoraGemmMinRows).
int64_t gemm_tile_rows(int64_t cols) {
  return std::max<int64_t>(kLoraGemmMinRows, kWideFloats / std::max<int64_t>(cols, 1));
}

// Floats of scratch the GEMM path needs: none in fp32 mode; in bf16 mode one tile of the wider
// of the two row kinds (dy rows of d_out, x rows of d_in).
template <class T>
int64_t gemm_scratch_floats(const DeviceLoraSlots& slots, const DeviceSegments& segs) {
  if constexpr (std::is_same_v<T, float>) {
    return 0;
  } else {
    int64_t floats = 0;
    for (const int64_t cols : {slots.d_in, slots.d_out}) {
      floats = std::max(floats, std::min(segs.rows, gemm_tile_rows(cols)) * cols);
    }
    return floats;
  }
}

// fn(b, n) for the row tiles [b, b + n) of a segment: the whole segment in fp32 mode, tiles of
// gemm_tile_rows(cols) rows in bf16 mode.
template <class T, class F>
void for_each_tile(const LoraSegmentJob& seg, int64_t cols, F&& fn) {
  const int64_t tile = std::is_same_v<T, float> ? seg.n_rows : gemm_tile_rows(cols);
  for (int64_t b = seg.row_begin; b < seg.row_begin + seg.n_rows; b += tile) {
    fn(b, std::min(tile, seg.row_begin + seg.n_rows - b));
  }
}

// Rows [b, b + n) of `src` (stride ld, from column col) as an fp32 GEMM operand: src itself in
// fp32 mode, else widened into `wide` (dense, row stride cols, from its first row).
template <class T>
const float* fp32_rows(const T* src, int64_t ld, int64_t col, int64_t b, int64_t n, int64_t cols,
                       float* wide, int64_t* ld_out, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    *ld_out = ld;
    return src + b * ld + col;
  } else {
    widen_rows_kernel<<<elementwise_grid(n * cols), kWidenThreads, 0, stream>>>(src + b * ld + col,
                                                                                ld, n, cols, wide);
    check_launch("widen_rows_kernel");
    *ld_out = cols;
    return wide;
  }
}

template <class T>
void expand_backward_gemm(const LoraPlan& plan, const float* h, const T* dy, int64_t ld_dy,
                          int64_t col_offset, const DeviceLoraSlots& slots, float* dh, float* dB,
                          float* wide, Blas& blas, cudaStream_t stream) {
  const int64_t d_out = slots.d_out, R = slots.max_rank;
  for (const LoraSegmentJob& seg : plan.segments) {
    const float c = slots.host_scale[seg.slot];
    const float* B_s = slots.B + int64_t{seg.slot} * d_out * R;
    float* dB_s = dB + int64_t{seg.slot} * d_out * R;
    for_each_tile<T>(seg, d_out, [&](int64_t b, int64_t n) {
      int64_t ld = 0;
      const float* dy_f = fp32_rows(dy, ld_dy, col_offset, b, n, d_out, wide, &ld, stream);
      gemm<float>(blas, Trans::no, Trans::no, n, seg.rank, d_out, c, dy_f, ld, B_s, R, 0.0f,
                  dh + b * R, R, stream);
      gemm<float>(blas, Trans::yes, Trans::no, d_out, seg.rank, n, c, dy_f, ld, h + b * R, R, 1.0f,
                  dB_s, R, stream);
    });
  }
}

template <class T>
void shrink_backward_gemm(const LoraPlan& plan, const T* x, int64_t ld_x, const float* dh,
                          const DeviceLoraSlots& slots, float* dA, T* dx, int64_t ld_dx,
                          float* wide, Blas& blas, cudaStream_t stream) {
  const int64_t d_in = slots.d_in, R = slots.max_rank;
  for (const LoraSegmentJob& seg : plan.segments) {
    const float* A_s = slots.A + int64_t{seg.slot} * R * d_in;
    float* dA_s = dA + int64_t{seg.slot} * R * d_in;
    for_each_tile<T>(seg, d_in, [&](int64_t b, int64_t n) {
      int64_t ld = 0;
      const float* x_f = fp32_rows(x, ld_x, 0, b, n, d_in, wide, &ld, stream);
      gemm<float>(blas, Trans::yes, Trans::no, seg.rank, d_in, n, 1.0f, dh + b * R, R, x_f, ld,
                  1.0f, dA_s, d_in, stream);
      if (dx == nullptr) return;
      if constexpr (std::is_same_v<T, float>) {
        gemm<float>(blas, Trans::no, Trans::no, n, d_in, seg.rank, 1.0f, dh + b * R, R, A_s, d_in,
                    1.0f, dx + b * ld_dx, ld_dx, stream);
      } else {
        // The dA product above is queued first on the stream: the widened x tile is free.
        gemm<float>(blas, Trans::no, Trans::no, n, d_in, seg.rank, 1.0f, dh + b * R, R, A_s, d_in,
                    0.0f, wide, d_in, stream);
        add_rows_kernel<<<elementwise_grid(n * d_in), kWidenThreads, 0, stream>>>(
            wide, n, d_in, dx + b * ld_dx, ld_dx);
        check_launch("add_rows_kernel");
      }
    });
  }
}

// Checks the GEMM path's scratch (bf16 mode) and returns it as floats.
template <class T>
float* gemm_scratch(const DeviceLoraSlots& slots, const DeviceSegments& segs, void* scratch,
                    size_t scratch_bytes, const char* kernel) {
  const size_t need = static_cast<size_t>(gemm_scratch_floats<T>(slots, segs)) * sizeof(float);
  SPINDLE_KERNEL_REQUIRE(need == 0 || (scratch != nullptr && scratch_bytes >= need), kernel,
                         "scratch must hold lora_backward_scratch_bytes<T>(slots, segments) bytes");
  return static_cast<float*>(scratch);
}

}  // namespace

bool lora_backward_uses_gemm(const DeviceLoraSlots& slots, const DeviceSegments& segments) {
  return gemm_plan(slots, segments, "cuda::lora_backward_uses_gemm").has_value();
}

template <class T>
size_t lora_backward_scratch_bytes(const DeviceLoraSlots& slots, const DeviceSegments& segments,
                                   bool with_blas) {
  const int64_t floats = with_blas && lora_backward_uses_gemm(slots, segments)
                             ? gemm_scratch_floats<T>(slots, segments)
                             : std::max(partial_floats(segments, slots.d_out * slots.max_rank),
                                        partial_floats(segments, slots.max_rank * slots.d_in));
  return static_cast<size_t>(floats) * sizeof(float);
}

template <class T>
void lora_expand_backward(const float* h, const T* dy, int64_t ld_dy, int64_t col_offset,
                          const DeviceLoraSlots& slots, DeviceSegments segments, float* dh,
                          float* dB, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                          Blas* blas) {
  constexpr const char* kName = "cuda::lora_expand_backward";
  check_common(slots, segments, kName);
  SPINDLE_KERNEL_REQUIRE(col_offset >= 0 && ld_dy >= col_offset + slots.d_out, kName,
                         "col_offset >= 0 and ld_dy >= col_offset + d_out");
  if (!has_work(segments)) return;
  SPINDLE_KERNEL_REQUIRE(h != nullptr && dy != nullptr && dh != nullptr && dB != nullptr, kName,
                         "h, dy, dh and dB must be non-null");
  SPINDLE_KERNEL_REQUIRE(slots.B != nullptr && slots.rank != nullptr && slots.scale != nullptr,
                         kName, "slots.B, slots.rank and slots.scale must be non-null");
  if (blas != nullptr) {
    if (const auto plan = gemm_plan(slots, segments, kName)) {
      float* wide = gemm_scratch<T>(slots, segments, scratch, scratch_bytes, kName);
      expand_backward_gemm<T>(*plan, h, dy, ld_dy, col_offset, slots, dh, dB, wide, *blas, stream);
      return;
    }
  }
  lora_dh_kernel<T><<<static_cast<unsigned>(segments.rows), kDhThreads, 0, stream>>>(
      dy, ld_dy, col_offset, slots, segments, dh);
  check_launch("lora_dh_kernel");
  launch_grad(segments, slots, slots.d_out * slots.max_rank, /*rank_minor=*/true, dB, scratch,
              scratch_bytes, stream, kName, "lora_grad_kernel (dB)",
              [&](unsigned n_chunks, int64_t chunk_rows, float* partial) {
                const dim3 grid(static_cast<unsigned>(segments.count),
                                tiles(slots.d_out, kGradTile), n_chunks);
                lora_grad_kernel<T, true><<<grid, kGradThreads, 0, stream>>>(
                    h, dy, ld_dy, col_offset, slots, segments, dB, chunk_rows, partial);
              });
}

template <class T>
void lora_shrink_backward(const T* x, int64_t ld_x, const float* dh, const DeviceLoraSlots& slots,
                          DeviceSegments segments, float* dA, T* dx, int64_t ld_dx, void* scratch,
                          size_t scratch_bytes, cudaStream_t stream, Blas* blas) {
  constexpr const char* kName = "cuda::lora_shrink_backward";
  check_common(slots, segments, kName);
  SPINDLE_KERNEL_REQUIRE(ld_x >= slots.d_in, kName, "ld_x >= d_in");
  SPINDLE_KERNEL_REQUIRE(dx == nullptr || ld_dx >= slots.d_in, kName, "ld_dx >= d_in");
  if (!has_work(segments)) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && dh != nullptr && dA != nullptr, kName,
                         "x, dh and dA must be non-null");
  SPINDLE_KERNEL_REQUIRE(slots.A != nullptr && slots.rank != nullptr, kName,
                         "slots.A and slots.rank must be non-null");
  if (blas != nullptr) {
    if (const auto plan = gemm_plan(slots, segments, kName)) {
      float* wide = gemm_scratch<T>(slots, segments, scratch, scratch_bytes, kName);
      shrink_backward_gemm<T>(*plan, x, ld_x, dh, slots, dA, dx, ld_dx, wide, *blas, stream);
      return;
    }
  }
  launch_grad(segments, slots, slots.max_rank * slots.d_in, /*rank_minor=*/false, dA, scratch,
              scratch_bytes, stream, kName, "lora_grad_kernel (dA)",
              [&](unsigned n_chunks, int64_t chunk_rows, float* partial) {
                const dim3 grid(static_cast<unsigned>(segments.count), tiles(slots.d_in, kGradTile),
                                n_chunks);
                lora_grad_kernel<T, false><<<grid, kGradThreads, 0, stream>>>(
                    dh, x, ld_x, /*col_offset=*/0, slots, segments, dA, chunk_rows, partial);
              });
  if (dx == nullptr) return;
  const dim3 dx_grid(static_cast<unsigned>(segments.rows), tiles(slots.d_in, kDxThreads));
  lora_dx_kernel<T><<<dx_grid, kDxThreads, 0, stream>>>(dh, slots, segments, dx, ld_dx);
  check_launch("lora_dx_kernel");
}

template size_t lora_backward_scratch_bytes<float>(const DeviceLoraSlots&, const DeviceSegments&,
                                                   bool);
template size_t lora_backward_scratch_bytes<bf16>(const DeviceLoraSlots&, const DeviceSegments&,
                                                  bool);
template void lora_expand_backward<float>(const float*, const float*, int64_t, int64_t,
                                          const DeviceLoraSlots&, DeviceSegments, float*, float*,
                                          void*, size_t, cudaStream_t, Blas*);
template void lora_expand_backward<bf16>(const float*, const bf16*, int64_t, int64_t,
                                         const DeviceLoraSlots&, DeviceSegments, float*, float*,
                                         void*, size_t, cudaStream_t, Blas*);
template void lora_shrink_backward<float>(const float*, int64_t, const float*,
                                          const DeviceLoraSlots&, DeviceSegments, float*, float*,
                                          int64_t, void*, size_t, cudaStream_t, Blas*);
template void lora_shrink_backward<bf16>(const bf16*, int64_t, const float*, const DeviceLoraSlots&,
                                         DeviceSegments, float*, bf16*, int64_t, void*, size_t,
                                         cudaStream_t, Blas*);

}  // namespace spindle::kernels::cuda
