// Exact causal GQA attention backward for dense training batches, FlashAttention-2 style in two
// tiled kernels that recompute the attention weights from q and k (no saved forward output).
// Tiles of kTile rows of q / dO and k / v are staged in shared memory as fp32 (rows padded by
// one float: conflict-free column reads); every accumulation is fp32. A block has kThreads
// threads; thread (i = tid / 8, sub = tid % 8) owns tile row i, the 4 tile columns
// sub, sub + 8, sub + 16, sub + 24 of the score tiles and the head dims sub, sub + 8, ... of
// its output row.
//
// 1. dq_kernel, a block per (sequence, query head h, query tile): pass 1 over the key tiles up
//    to the tile's last row gives lse = m + log Σ exp(s − m) and D = Σ_j P_j·dP_j (= dO·O), with
//    s = scale·q·k_j and dP_j = dO·v_j; both go to a scratch table. Pass 2 recomputes
//    P_j = exp(s − lse), dS_j = scale·P_j·(dP_j − D) and dq = Σ_j dS_j·k_j.
// 2. dkdv_kernel, a block per (sequence, KV head g, key tile): over the group's query heads and
//    the query tiles from the key tile on, it recomputes P and dS from the table and sums
//    dv_j = Σ P·dO_t and dk_j = Σ dS·q_t. Each block owns its dK/dV rows and each block its dq
//    rows, every sum runs in a fixed order: no atomics, and the result does not depend on
//    scheduling.
//
// Scratch: n_seqs·max_n·n_heads·2 floats, the caller's (attention_backward_scratch_bytes). A sequence longer than
// max_n (a caller bug) is truncated to max_n rows.

#include <algorithm>
#include <type_traits>

#include "attention_common.cuh"

namespace spindle::kernels::cuda {
namespace detail {
namespace {

constexpr int kTile = 32;                                   // rows of a q / k tile
constexpr int kThreads = 256;                               // 8 threads per tile row
constexpr int kLanesPerRow = kThreads / kTile;              // 8
constexpr int kColsPerThread = kTile / kLanesPerRow;        // 4 score columns per thread
constexpr int kDimsPerThread = kMaxHeadDim / kLanesPerRow;  // head dims per thread (max)
constexpr int kScoreLd = kTile + 1;                         // padded score-tile row

// dst[r, d] (row stride ps) = src[(row0 + r)·ld + d] for row0 + r < n, else 0; coalesced reads.
template <class T>
__device__ __forceinline__ void load_tile(float* dst, int ps, const T* __restrict__ src, int64_t ld,
                                          int64_t row0, int64_t n, int hd) {
  for (int e = static_cast<int>(threadIdx.x); e < kTile * hd; e += kThreads) {
    const int r = e / hd, d = e % hd;
    const int64_t row = row0 + r;
    dst[r * ps + d] = row < n ? to_f32(src[row * ld + d]) : 0.0f;
  }
}

// s[c] = a·X[sub + 8c, :], dp[c] = b·Y[sub + 8c, :] over hd dims (X, Y row stride ps).
__device__ __forceinline__ void row_dots(const float* a, const float* b, const float* X,
                                         const float* Y, int ps, int sub, int hd,
                                         float (&s)[kColsPerThread], float (&dp)[kColsPerThread]) {
#pragma unroll
  for (int c = 0; c < kColsPerThread; ++c) s[c] = dp[c] = 0.0f;
  for (int d = 0; d < hd; ++d) {
    const float av = a[d], bv = b[d];
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const int r = (sub + kLanesPerRow * c) * ps + d;
      s[c] = fmaf(av, X[r], s[c]);
      dp[c] = fmaf(bv, Y[r], dp[c]);
    }
  }
}

// Reductions over the 8 threads of one tile row (consecutive lanes; all lanes take part).
__device__ __forceinline__ float row_max(float x) {
  for (int o = 1; o < kLanesPerRow; o <<= 1) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}
__device__ __forceinline__ float row_sum(float x) {
  for (int o = 1; o < kLanesPerRow; o <<= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}

size_t dq_smem_bytes(int hd) {
  return (size_t{4} * kTile * (hd + 1) + size_t{kTile} * kScoreLd) * sizeof(float);
}
size_t dkdv_smem_bytes(int hd) {
  return (size_t{4} * kTile * (hd + 1) + size_t{2} * kTile * kScoreLd + 2 * kTile) * sizeof(float);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
              const T* __restrict__ d_out, T* __restrict__ dq, const DenseSeq* __restrict__ seqs,
              BwdShape sh, float* __restrict__ stats) {
  extern __shared__ float smem[];
  const DenseSeq seq = seqs[blockIdx.x];
  const int64_t n = std::min<int64_t>(seq.n, sh.max_n);
  const int64_t t0 = int64_t{blockIdx.z} * kTile;
  if (t0 >= n) return;  // block-uniform, before any barrier
  const int64_t h = blockIdx.y;
  const int hd = sh.hd;
  const int ps = hd + 1;
  float* Qs = smem;
  float* dOs = Qs + kTile * ps;
  float* Ks = dOs + kTile * ps;
  float* Vs = Ks + kTile * ps;
  float* dSs = Vs + kTile * ps;  // [kTile][kScoreLd]
  const int64_t ld_q = sh.n_heads * hd;
  const int64_t ld_kv = sh.n_kv_heads * hd;
  const T* Qg = q + seq.row_begin * ld_q + h * hd;
  const T* dOg = d_out + seq.row_begin * ld_q + h * hd;
  const T* Kg = k + seq.row_begin * ld_kv + (h / sh.group) * hd;
  const T* Vg = v + seq.row_begin * ld_kv + (h / sh.group) * hd;
  load_tile(Qs, ps, Qg, ld_q, t0, n, hd);
  load_tile(dOs, ps, dOg, ld_q, t0, n, hd);

  const int tid = static_cast<int>(threadIdx.x);
  const int i = tid / kLanesPerRow, sub = tid % kLanesPerRow;
  const int64_t t = t0 + i;
  const bool row_ok = t < n;
  const int64_t last = std::min<int64_t>(n, t0 + kTile) - 1;  // keys 0..last
  const float* q_row = Qs + i * ps;
  const float* do_row = dOs + i * ps;

  // Pass 1: online softmax statistics of the row over its keys j <= t.
  float m = -INFINITY, l = 0.0f, dsum = 0.0f;
  float s[kColsPerThread], dp[kColsPerThread];
  for (int64_t j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous K/V tile is consumed
    load_tile(Ks, ps, Kg, ld_kv, j0, n, hd);
    load_tile(Vs, ps, Vg, ld_kv, j0, n, hd);
    __syncthreads();
    row_dots(q_row, do_row, Ks, Vs, ps, sub, hd, s, dp);
    float tmax = -INFINITY;
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const int64_t j = j0 + sub + kLanesPerRow * c;
      s[c] = row_ok && j <= t ? sh.scale * s[c] : -INFINITY;
      tmax = fmaxf(tmax, s[c]);
    }
    const float m_new = fmaxf(m, row_max(tmax));
    const bool any = m_new != -INFINITY;
    float lp = 0.0f, dps = 0.0f;
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const float p = any ? expf(s[c] - m_new) : 0.0f;
      lp += p;
      dps = fmaf(p, dp[c], dps);
    }
    lp = row_sum(lp);
    dps = row_sum(dps);
    const float alpha = any ? expf(m - m_new) : 1.0f;
    l = l * alpha + lp;
    dsum = dsum * alpha + dps;
    m = m_new;
  }
  const float lse = row_ok ? m + logf(l) : 0.0f;  // row_ok: key 0 gives l >= 1
  const float D = row_ok ? dsum / l : 0.0f;
  if (row_ok && sub == 0) {
    const int64_t si = stat_index(sh, blockIdx.x, t, h);
    stats[si] = lse;
    stats[si + 1] = D;
  }

  // Pass 2: dq = Σ_j dS_j·k_j.
  float acc[kDimsPerThread];
#pragma unroll
  for (int e = 0; e < kDimsPerThread; ++e) acc[e] = 0.0f;
  const int n_dims = hd / kLanesPerRow;
  for (int64_t j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous K/V/dS tiles are consumed
    load_tile(Ks, ps, Kg, ld_kv, j0, n, hd);
    load_tile(Vs, ps, Vg, ld_kv, j0, n, hd);
    __syncthreads();
    row_dots(q_row, do_row, Ks, Vs, ps, sub, hd, s, dp);
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const int64_t j = j0 + sub + kLanesPerRow * c;
      const float ds =
          row_ok && j <= t ? sh.scale * expf(sh.scale * s[c] - lse) * (dp[c] - D) : 0.0f;
      dSs[i * kScoreLd + sub + kLanesPerRow * c] = ds;
    }
    __syncthreads();
    for (int jj = 0; jj < kTile; ++jj) {
      const float g = dSs[i * kScoreLd + jj];
      const float* kr = Ks + jj * ps + sub;
#pragma unroll
      for (int e = 0; e < kDimsPerThread; ++e) {
        if (e < n_dims) acc[e] = fmaf(g, kr[kLanesPerRow * e], acc[e]);
      }
    }
  }
  if (!row_ok) return;  // after the last barrier
  T* out = dq + (seq.row_begin + t) * ld_q + h * hd + sub;
#pragma unroll
  for (int e = 0; e < kDimsPerThread; ++e) {
    if (e < n_dims) out[kLanesPerRow * e] = from_f32<T>(acc[e]);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                const T* __restrict__ d_out, T* __restrict__ dk, T* __restrict__ dv,
                const DenseSeq* __restrict__ seqs, BwdShape sh, const float* __restrict__ stats) {
  extern __shared__ float smem[];
  const DenseSeq seq = seqs[blockIdx.x];
  const int64_t n = std::min<int64_t>(seq.n, sh.max_n);
  const int64_t j0 = int64_t{blockIdx.z} * kTile;
  if (j0 >= n) return;  // block-uniform, before any barrier
  const int64_t g = blockIdx.y;
  const int hd = sh.hd;
  const int ps = hd + 1;
  float* Ks = smem;
  float* Vs = Ks + kTile * ps;
  float* Qs = Vs + kTile * ps;
  float* dOs = Qs + kTile * ps;
  float* Ps = dOs + kTile * ps;        // [kTile][kScoreLd]
  float* dSs = Ps + kTile * kScoreLd;  // [kTile][kScoreLd]
  float* lse_s = dSs + kTile * kScoreLd;
  float* D_s = lse_s + kTile;
  const int64_t ld_q = sh.n_heads * hd;
  const int64_t ld_kv = sh.n_kv_heads * hd;
  load_tile(Ks, ps, k + seq.row_begin * ld_kv + g * hd, ld_kv, j0, n, hd);
  load_tile(Vs, ps, v + seq.row_begin * ld_kv + g * hd, ld_kv, j0, n, hd);

  const int tid = static_cast<int>(threadIdx.x);
  const int i = tid / kLanesPerRow, sub = tid % kLanesPerRow;
  const int64_t j = j0 + i;
  const bool key_ok = j < n;
  const float* k_row = Ks + i * ps;
  const float* v_row = Vs + i * ps;
  const int n_dims = hd / kLanesPerRow;
  float acc_k[kDimsPerThread], acc_v[kDimsPerThread];
#pragma unroll
  for (int e = 0; e < kDimsPerThread; ++e) acc_k[e] = acc_v[e] = 0.0f;
  float s[kColsPerThread], dp[kColsPerThread];

  for (int64_t hh = 0; hh < sh.group; ++hh) {
    const int64_t h = g * sh.group + hh;
    const T* Qg = q + seq.row_begin * ld_q + h * hd;
    const T* dOg = d_out + seq.row_begin * ld_q + h * hd;
    for (int64_t t0 = j0; t0 < n; t0 += kTile) {
      __syncthreads();  // the previous Q/dO/P/dS tiles are consumed
      load_tile(Qs, ps, Qg, ld_q, t0, n, hd);
      load_tile(dOs, ps, dOg, ld_q, t0, n, hd);
      if (tid < kTile) {
        const int64_t t = t0 + tid;
        const int64_t si = stat_index(sh, blockIdx.x, t < n ? t : 0, h);
        lse_s[tid] = t < n ? stats[si] : 0.0f;
        D_s[tid] = t < n ? stats[si + 1] : 0.0f;
      }
      __syncthreads();
      row_dots(k_row, v_row, Qs, dOs, ps, sub, hd, s, dp);
#pragma unroll
      for (int c = 0; c < kColsPerThread; ++c) {
        const int tc = sub + kLanesPerRow * c;
        const int64_t t = t0 + tc;
        const bool ok = key_ok && t < n && t >= j;
        const float p = ok ? expf(sh.scale * s[c] - lse_s[tc]) : 0.0f;
        Ps[i * kScoreLd + tc] = p;
        dSs[i * kScoreLd + tc] = ok ? sh.scale * p * (dp[c] - D_s[tc]) : 0.0f;
      }
      __syncthreads();
      for (int tt = 0; tt < kTile; ++tt) {
        const float p = Ps[i * kScoreLd + tt];
        const float ds = dSs[i * kScoreLd + tt];
        const float* qr = Qs + tt * ps + sub;
        const float* dor = dOs + tt * ps + sub;
#pragma unroll
        for (int e = 0; e < kDimsPerThread; ++e) {
          if (e < n_dims) {
            acc_v[e] = fmaf(p, dor[kLanesPerRow * e], acc_v[e]);
            acc_k[e] = fmaf(ds, qr[kLanesPerRow * e], acc_k[e]);
          }
        }
      }
    }
  }
  if (!key_ok) return;  // after the last barrier
  const int64_t at = (seq.row_begin + j) * ld_kv + g * hd + sub;
#pragma unroll
  for (int e = 0; e < kDimsPerThread; ++e) {
    if (e < n_dims) {
      dk[at + kLanesPerRow * e] = from_f32<T>(acc_k[e]);
      dv[at + kLanesPerRow * e] = from_f32<T>(acc_v[e]);
    }
  }
}

}  // namespace
}  // namespace detail

size_t attention_backward_scratch_bytes(int32_t n_seqs, int32_t max_n, int64_t n_heads) {
  if (n_seqs <= 0 || max_n <= 0 || n_heads <= 0) return 0;
  return static_cast<size_t>(n_seqs) * static_cast<size_t>(max_n) * static_cast<size_t>(n_heads) *
         2 * sizeof(float);
}

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* d_out, T* dq, T* dk, T* dv,
                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, const DenseSeq* seqs,
                        int32_t n_seqs, int32_t max_n, float scale, void* scratch,
                        size_t scratch_bytes, cudaStream_t stream, bool allow_tensor_cores) {
  constexpr const char* kKernel = "attention_backward";
  SPINDLE_KERNEL_REQUIRE(n_kv_heads > 0, kKernel, "n_kv_heads > 0");
  SPINDLE_KERNEL_REQUIRE(head_dim > 0 && head_dim % 8 == 0 && head_dim <= detail::kMaxHeadDim,
                         kKernel, "head_dim must be a multiple of 8 in [8, 256]");
  SPINDLE_KERNEL_REQUIRE(n_heads > 0 && n_heads % n_kv_heads == 0, kKernel,
                         "n_heads must be a positive multiple of n_kv_heads");
  SPINDLE_KERNEL_REQUIRE(n_heads <= 65535, kKernel, "n_heads must be <= 65535 (grid limit)");
  SPINDLE_KERNEL_REQUIRE(n_seqs >= 0 && max_n >= 0, kKernel, "n_seqs >= 0 and max_n >= 0");
  if (n_seqs == 0 || max_n == 0) return;
  SPINDLE_KERNEL_REQUIRE(q != nullptr && k != nullptr && v != nullptr && d_out != nullptr &&
                             dq != nullptr && dk != nullptr && dv != nullptr && seqs != nullptr,
                         kKernel, "q, k, v, d_out, dq, dk, dv and seqs must be non-null");
  const int n_tiles = (max_n + detail::kTile - 1) / detail::kTile;
  SPINDLE_KERNEL_REQUIRE(n_tiles <= 65535, kKernel, "max_n too large (grid)");

  SPINDLE_KERNEL_REQUIRE(
      scratch != nullptr &&
          scratch_bytes >= attention_backward_scratch_bytes(n_seqs, max_n, n_heads),
      kKernel, "scratch must hold attention_backward_scratch_bytes(n_seqs, max_n, n_heads) bytes");
  float* stats = static_cast<float*>(scratch);
  const int hd = static_cast<int>(head_dim);
  const detail::BwdShape sh{n_heads, n_kv_heads, n_heads / n_kv_heads, hd, max_n, scale};
  if constexpr (std::is_same_v<T, bf16>) {
    if (allow_tensor_cores &&
        attention_backward_uses_tensor_cores<T>(q, k, v, d_out, dq, dk, dv, head_dim)) {
      detail::launch_backward_tc(q, k, v, d_out, dq, dk, dv, sh, seqs, n_seqs, stats, stream);
      return;
    }
  }
  const size_t dq_smem = detail::dq_smem_bytes(hd);
  const size_t dkdv_smem = detail::dkdv_smem_bytes(hd);
  // Above 48 KiB a kernel must opt in to dynamic shared memory (sm_90: up to 227 KiB).
  check(cudaFuncSetAttribute(detail::dq_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(dq_smem)),
        "cudaFuncSetAttribute (attention_backward dq kernel)");
  check(cudaFuncSetAttribute(detail::dkdv_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(dkdv_smem)),
        "cudaFuncSetAttribute (attention_backward dk/dv kernel)");
  // `stats`: the per-row softmax statistics the dq kernel leaves for the dk/dv kernel, in the
  // caller's scratch (stream order: the next call's kernels start after these end).
  detail::dq_kernel<T><<<dim3(n_seqs, static_cast<unsigned>(n_heads), n_tiles), detail::kThreads,
                         dq_smem, stream>>>(q, k, v, d_out, dq, seqs, sh, stats);
  check(cudaGetLastError(), "attention_backward (dq kernel)");
  detail::dkdv_kernel<T>
      <<<dim3(n_seqs, static_cast<unsigned>(n_kv_heads), n_tiles), detail::kThreads, dkdv_smem,
         stream>>>(q, k, v, d_out, dk, dv, seqs, sh, stats);
  check(cudaGetLastError(), "attention_backward (dk/dv kernel)");
}

template <class T>
bool attention_backward_uses_tensor_cores(const T* q, const T* k, const T* v, const T* d_out,
                                          const T* dq, const T* dk, const T* dv, int64_t head_dim) {
  if constexpr (!std::is_same_v<T, bf16>) {
    return false;
  } else {
    const void* ptrs[] = {q, k, v, d_out, dq, dk, dv};
    return detail::tc_backward_applies(ptrs, 7, head_dim);
  }
}

#define SPINDLE_INSTANTIATE_ATTENTION_BACKWARD(T)                                                  \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, \
                                      int64_t, int64_t, const DenseSeq*, int32_t, int32_t, float,  \
                                      void*, size_t, cudaStream_t, bool);                          \
  template bool attention_backward_uses_tensor_cores<T>(const T*, const T*, const T*, const T*,    \
                                                        const T*, const T*, const T*, int64_t);
SPINDLE_INSTANTIATE_ATTENTION_BACKWARD(float)
SPINDLE_INSTANTIATE_ATTENTION_BACKWARD(bf16)
#undef SPINDLE_INSTANTIATE_ATTENTION_BACKWARD

}  // namespace spindle::kernels::cuda
