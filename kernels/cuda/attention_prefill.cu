// Tiled causal prefill attention over the paged cache (flash-attention-2 forward, fp32 CUDA
// cores): grid (sequence, query head, query tile of kTileQ rows). A block stages its query tile
// (pre-scaled) and, one KV tile of kTileK = 32 keys at a time, the K and V rows gathered through
// the block table, all as fp32 in shared memory. Each warp owns query rows w, w + 8, ...: lane j
// scores key j of the tile, the warp updates the row's running max m and sum l (online softmax)
// and rescales the row's accumulator (lanes over columns). Query j of a sequence sees keys
// [0, n_past + j]; the block walks keys [0, n_past + last row of its tile].
//
// Shared memory (floats): Q [tq, hd], O [tq, hd], K [32, hd + 1] (padded: lanes read different
// rows of one column without bank conflicts), V [32, hd], m [tq], l [tq]; tq = 64 for
// head_dim <= 128 (≈ 99 KiB at 128), 32 above (≈ 130 KiB at 256).
// launch_prefill sends bf16 calls that prefill_tc_applies accepts to the tensor-core kernel
// (attention_prefill_tc.cu); this one serves fp32, the other head dims and unaligned operands.

#include <algorithm>
#include <type_traits>

#include "attention_common.cuh"

namespace spindle::kernels::cuda {
namespace detail {
namespace {

constexpr int kWarps = 8;
constexpr int kTileK = 32;  // one key per lane

int tile_q(int64_t hd) {
  return hd <= 128 ? 64 : 32;
}

size_t prefill_smem(int tq, int hd) {
  return sizeof(float) *
         (static_cast<size_t>(2 * tq * hd) + kTileK * (hd + 1) + kTileK * hd + 2 * tq);
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    prefill_kernel(const T* q, int64_t ld_q, T* out, int64_t ld_out, DevicePagedKv<T> cache,
                   const DeviceAttnSeq* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                   int64_t group, int tq, float scale, bool skip_single) {
  extern __shared__ __align__(16) float smem[];
  const DeviceAttnSeq seq = seqs[blockIdx.x];
  if (skip_single && seq.n_new == 1) return;
  const int t0 = static_cast<int>(blockIdx.z) * tq;
  if (t0 >= seq.n_new) return;
  const int n_rows = std::min(tq, seq.n_new - t0);
  const int hd = static_cast<int>(cache.head_dim);
  const int64_t h = blockIdx.y;
  const int64_t width = cache.n_kv_heads * hd;
  const int64_t kv_col = (h / group) * hd;
  const int32_t* table = block_tables + seq.table_offset;
  const int64_t first_pos = int64_t{seq.n_past} + t0;  // position of the tile's row 0
  const int64_t kv_end = first_pos + n_rows;           // keys [0, kv_end)

  float* Qs = smem;                    // [tq, hd]
  float* Os = Qs + tq * hd;            // [tq, hd]
  float* Ks = Os + tq * hd;            // [kTileK, hd + 1]
  float* Vs = Ks + kTileK * (hd + 1);  // [kTileK, hd]
  float* Ms = Vs + kTileK * hd;        // [tq]
  float* Ls = Ms + tq;                 // [tq]

  for (int e = threadIdx.x; e < n_rows * hd; e += blockDim.x) {
    const int i = e / hd;
    const int d = e % hd;
    Qs[e] = scale * to_f32(q[(seq.row_begin + t0 + i) * ld_q + h * hd + d]);
    Os[e] = 0.0f;
  }
  for (int i = threadIdx.x; i < n_rows; i += blockDim.x) {
    Ms[i] = -INFINITY;
    Ls[i] = 0.0f;
  }

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  for (int64_t kv0 = 0; kv0 < kv_end; kv0 += kTileK) {
    __syncthreads();  // the previous tile is consumed (and Q/O/m/l are initialised)
    for (int e = threadIdx.x; e < kTileK * hd; e += blockDim.x) {
      const int r = e / hd;
      const int d = e % hd;
      const int64_t pos = kv0 + r;
      float kx = 0.0f;
      float vx = 0.0f;
      if (pos < kv_end) {
        const int64_t off =
            paged_offset(table, pos, cache.block_size, cache.n_blocks, width, kv_col);
        if (off >= 0) {
          kx = to_f32(cache.k[off + d]);
          vx = to_f32(cache.v[off + d]);
        }
      }
      Ks[r * (hd + 1) + d] = kx;
      Vs[r * hd + d] = vx;
    }
    __syncthreads();

    for (int i = warp; i < n_rows; i += kWarps) {
      const int64_t last_key = first_pos + i;  // inclusive
      if (kv0 > last_key) continue;            // warp-uniform: no key of this tile is visible
      const int64_t j = kv0 + lane;
      float s = -INFINITY;
      if (j <= last_key) {
        const float* qi = Qs + i * hd;
        const float* kj = Ks + lane * (hd + 1);
        float acc = 0.0f;
        for (int d = 0; d < hd; ++d) acc = fmaf(qi[d], kj[d], acc);
        s = acc;
      }
      const float m_old = Ms[i];
      const float m_new = fmaxf(m_old, warp_max(s));  // finite: key kv0 is visible
      const float alpha = expf(m_old - m_new);        // 0 on the first visible tile
      const float p = j <= last_key ? expf(s - m_new) : 0.0f;
      const float l_new = Ls[i] * alpha + warp_sum(p);

      float acc[kColsPerLane];
      float* oi = Os + i * hd;
#pragma unroll
      for (int c = 0; c < kColsPerLane; ++c) {
        const int d = lane + 32 * c;
        acc[c] = d < hd ? oi[d] * alpha : 0.0f;
      }
      for (int jj = 0; jj < kTileK; ++jj) {
        const float pj = __shfl_sync(kFullMask, p, jj);
        const float* vj = Vs + jj * hd;
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < hd) acc[c] = fmaf(pj, vj[d], acc[c]);
        }
      }
#pragma unroll
      for (int c = 0; c < kColsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < hd) oi[d] = acc[c];
      }
      __syncwarp();  // every lane read Ms[i] / Ls[i] before lane 0 overwrites them
      if (lane == 0) {
        Ms[i] = m_new;
        Ls[i] = l_new;
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_rows * hd; e += blockDim.x) {
    const int i = e / hd;
    const int d = e % hd;
    out[(seq.row_begin + t0 + i) * ld_out + h * hd + d] = from_f32<T>(Os[e] / Ls[i]);
  }
}

}  // namespace

template <class T>
void launch_prefill(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                    const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                    const int32_t* block_tables, int32_t max_new, float scale, bool skip_single,
                    cudaStream_t stream, bool allow_tensor_cores) {
  const int tq = tile_q(cache.head_dim);
  const int n_tiles = (max_new + tq - 1) / tq;
  SPINDLE_KERNEL_REQUIRE(n_tiles <= 65535, "attention_prefill", "max_new too large (grid)");
  if constexpr (std::is_same_v<T, bf16>) {
    if (allow_tensor_cores && prefill_tc_applies(q, ld_q, cache)) {
      launch_prefill_tc(q, ld_q, out, ld_out, n_heads, cache, seqs, n_seqs, block_tables, max_new,
                        scale, skip_single, stream);
      return;
    }
  }
  const size_t smem = prefill_smem(tq, static_cast<int>(cache.head_dim));
  if (smem > 48 * 1024) {
    check(cudaFuncSetAttribute(prefill_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "cudaFuncSetAttribute (attention_prefill shared memory)");
  }
  prefill_kernel<T>
      <<<dim3(n_seqs, static_cast<unsigned>(n_heads), n_tiles), kWarps * 32, smem, stream>>>(
          q, ld_q, out, ld_out, cache, seqs, block_tables, n_heads / cache.n_kv_heads, tq, scale,
          skip_single);
  check_launch("attention_prefill");
}

template void launch_prefill<float>(const float*, int64_t, float*, int64_t, int64_t,
                                    const DevicePagedKv<float>&, const DeviceAttnSeq*, int32_t,
                                    const int32_t*, int32_t, float, bool, cudaStream_t, bool);
template void launch_prefill<bf16>(const bf16*, int64_t, bf16*, int64_t, int64_t,
                                   const DevicePagedKv<bf16>&, const DeviceAttnSeq*, int32_t,
                                   const int32_t*, int32_t, float, bool, cudaStream_t, bool);

}  // namespace detail

template <class T>
void attention_prefill(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                       const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                       const int32_t* block_tables, int32_t max_new, int32_t max_ctx, float scale,
                       cudaStream_t stream, bool allow_tensor_cores) {
  if (!detail::check_paged_args("attention_prefill", q, ld_q, out, ld_out, n_heads, cache, seqs,
                                n_seqs, block_tables, max_new, max_ctx))
    return;
  detail::launch_prefill(q, ld_q, out, ld_out, n_heads, cache, seqs, n_seqs, block_tables, max_new,
                         scale, /*skip_single=*/false, stream, allow_tensor_cores);
}

template <class T>
bool attention_prefill_uses_tensor_cores(const T* q, int64_t ld_q, const DevicePagedKv<T>& cache) {
  if constexpr (std::is_same_v<T, bf16>) {
    return detail::prefill_tc_applies(q, ld_q, cache);
  } else {
    return false;
  }
}

#define SPINDLE_INSTANTIATE_ATTENTION_PREFILL(T)                                                   \
  template void attention_prefill<T>(const T*, int64_t, T*, int64_t, int64_t,                      \
                                     const DevicePagedKv<T>&, const DeviceAttnSeq*, int32_t,       \
                                     const int32_t*, int32_t, int32_t, float, cudaStream_t, bool); \
  template bool attention_prefill_uses_tensor_cores<T>(const T*, int64_t, const DevicePagedKv<T>&);
SPINDLE_INSTANTIATE_ATTENTION_PREFILL(float)
SPINDLE_INSTANTIATE_ATTENTION_PREFILL(bf16)
#undef SPINDLE_INSTANTIATE_ATTENTION_PREFILL

}  // namespace spindle::kernels::cuda
