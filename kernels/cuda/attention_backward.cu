// Exact causal GQA attention backward for dense training batches, in two kernels that recompute
// the attention weights from q and k (no saved forward output):
//
// 1. dq_kernel, a warp per (query row t, query head h), grid (sequence, head, row block):
//    pass 1 over keys j <= t (a lane per key) gives lse = m + log Σ exp(s − m) and
//    D = Σ_j P_j·dP_j (= dO·O) with s = scale·q·k_j, dP_j = dO·v_j; both go to a scratch table.
//    Pass 2 recomputes P_j = exp(s − lse), dS_j = scale·P_j·(dP_j − D) and dq = Σ_j dS_j·k_j
//    (lanes over columns, dS broadcast by shuffles).
// 2. dkdv_kernel, a warp per (key row j, KV head g), grid (sequence, KV head, row block): over
//    the group's query heads and the rows t >= j (a lane per row) it recomputes P and dS from
//    the table and sums dv_j = Σ P·dO_t, dk_j = Σ dS·q_t in a fixed order: no atomics, and the
//    result does not depend on scheduling.
//
// Scratch: n_seqs·max_n·n_heads·2 floats (stream-ordered allocation). A sequence longer than
// max_n (a caller bug) is truncated to max_n rows.

#include <algorithm>

#include "attention_common.cuh"

namespace spindle::kernels::cuda {
namespace detail {
namespace {

constexpr int kWarps = 8;  // rows per block

struct BwdShape {
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t group;
  int hd;
  int max_n;
  float scale;
};

// stats[((s·max_n + t)·n_heads + h)·2 + {0: lse, 1: D}]
__device__ __forceinline__ int64_t stat_index(const BwdShape& sh, int64_t s, int64_t t, int64_t h) {
  return ((s * sh.max_n + t) * sh.n_heads + h) * 2;
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    dq_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
              const T* __restrict__ d_out, T* __restrict__ dq, const DenseSeq* __restrict__ seqs,
              BwdShape sh, float* __restrict__ stats) {
  __shared__ float rows[kWarps][2][kMaxHeadDim];  // this warp's q and dO row
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const DenseSeq seq = seqs[blockIdx.x];
  const int64_t n = std::min<int64_t>(seq.n, sh.max_n);
  const int64_t t = int64_t{blockIdx.z} * kWarps + warp;
  if (t >= n) return;  // warp-uniform; no block-wide barrier follows
  const int64_t h = blockIdx.y;
  const int hd = sh.hd;
  const int64_t ld_q = sh.n_heads * hd;
  const int64_t ld_kv = sh.n_kv_heads * hd;
  const int64_t at = (seq.row_begin + t) * ld_q + h * hd;
  const T* K = k + seq.row_begin * ld_kv + (h / sh.group) * hd;
  const T* V = v + seq.row_begin * ld_kv + (h / sh.group) * hd;
  float* qs = rows[warp][0];
  float* dos = rows[warp][1];
  for (int d = lane; d < hd; d += 32) {
    qs[d] = to_f(q[at + d]);
    dos[d] = to_f(d_out[at + d]);
  }
  __syncwarp();

  // Pass 1: per-lane online statistics over keys lane, lane + 32, ..., then merged.
  float m = -INFINITY, l = 0.0f, dsum = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) {
    const float s = sh.scale * dot_row(qs, K + j * ld_kv, hd);
    const float dp = dot_row(dos, V + j * ld_kv, hd);
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * alpha + p;
    dsum = dsum * alpha + p * dp;
    m = m_new;
  }
  const float m_all = warp_max(m);  // finite: lane 0 saw key 0
  const float f = m == -INFINITY ? 0.0f : expf(m - m_all);
  const float l_all = warp_sum(l * f);
  const float D = warp_sum(dsum * f) / l_all;
  const float lse = m_all + logf(l_all);
  if (lane == 0) {
    const int64_t si = stat_index(sh, blockIdx.x, t, h);
    stats[si] = lse;
    stats[si + 1] = D;
  }

  // Pass 2: dq = Σ_j dS_j·k_j.
  float acc[kColsPerLane];
#pragma unroll
  for (int c = 0; c < kColsPerLane; ++c) acc[c] = 0.0f;
  for (int64_t j0 = 0; j0 <= t; j0 += 32) {
    const int64_t j = j0 + lane;
    float ds = 0.0f;
    if (j <= t) {
      const float s = sh.scale * dot_row(qs, K + j * ld_kv, hd);
      const float dp = dot_row(dos, V + j * ld_kv, hd);
      ds = sh.scale * expf(s - lse) * (dp - D);
    }
    const int n_j = static_cast<int>(std::min<int64_t>(32, t + 1 - j0));
    for (int jj = 0; jj < n_j; ++jj) {
      const float dsj = __shfl_sync(kFullMask, ds, jj);
      const T* kj = K + (j0 + jj) * ld_kv;
#pragma unroll
      for (int c = 0; c < kColsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < hd) acc[c] = fmaf(dsj, to_f(kj[d]), acc[c]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kColsPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < hd) dq[at + d] = from_f<T>(acc[c]);
  }
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    dkdv_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                const T* __restrict__ d_out, T* __restrict__ dk, T* __restrict__ dv,
                const DenseSeq* __restrict__ seqs, BwdShape sh, const float* __restrict__ stats) {
  __shared__ float rows[kWarps][2][kMaxHeadDim];  // this warp's k and v row
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const DenseSeq seq = seqs[blockIdx.x];
  const int64_t n = std::min<int64_t>(seq.n, sh.max_n);
  const int64_t j = int64_t{blockIdx.z} * kWarps + warp;
  if (j >= n) return;  // warp-uniform; no block-wide barrier follows
  const int64_t g = blockIdx.y;
  const int hd = sh.hd;
  const int64_t ld_q = sh.n_heads * hd;
  const int64_t ld_kv = sh.n_kv_heads * hd;
  const int64_t at = (seq.row_begin + j) * ld_kv + g * hd;
  float* ks = rows[warp][0];
  float* vs = rows[warp][1];
  for (int d = lane; d < hd; d += 32) {
    ks[d] = to_f(k[at + d]);
    vs[d] = to_f(v[at + d]);
  }
  __syncwarp();

  float acc_k[kColsPerLane], acc_v[kColsPerLane];
#pragma unroll
  for (int c = 0; c < kColsPerLane; ++c) acc_k[c] = acc_v[c] = 0.0f;
  for (int64_t hh = 0; hh < sh.group; ++hh) {
    const int64_t h = g * sh.group + hh;
    const T* Q = q + seq.row_begin * ld_q + h * hd;
    const T* dO = d_out + seq.row_begin * ld_q + h * hd;
    for (int64_t t0 = j; t0 < n; t0 += 32) {
      const int64_t t = t0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (t < n) {
        const int64_t si = stat_index(sh, blockIdx.x, t, h);
        const float s = sh.scale * dot_row(ks, Q + t * ld_q, hd);
        const float dp = dot_row(vs, dO + t * ld_q, hd);
        p = expf(s - stats[si]);
        ds = sh.scale * p * (dp - stats[si + 1]);
      }
      const int n_t = static_cast<int>(std::min<int64_t>(32, n - t0));
      for (int tt = 0; tt < n_t; ++tt) {
        const float pt = __shfl_sync(kFullMask, p, tt);
        const float dst = __shfl_sync(kFullMask, ds, tt);
        const T* qt = Q + (t0 + tt) * ld_q;
        const T* dot = dO + (t0 + tt) * ld_q;
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < hd) {
            acc_v[c] = fmaf(pt, to_f(dot[d]), acc_v[c]);
            acc_k[c] = fmaf(dst, to_f(qt[d]), acc_k[c]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kColsPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < hd) {
      dk[at + d] = from_f<T>(acc_k[c]);
      dv[at + d] = from_f<T>(acc_v[c]);
    }
  }
}

}  // namespace
}  // namespace detail

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* d_out, T* dq, T* dk, T* dv,
                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, const DenseSeq* seqs,
                        int32_t n_seqs, int32_t max_n, float scale, cudaStream_t stream) {
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
  const int n_row_blocks = (max_n + detail::kWarps - 1) / detail::kWarps;
  SPINDLE_KERNEL_REQUIRE(n_row_blocks <= 65535, kKernel, "max_n too large (grid)");

  const detail::BwdShape sh{n_heads, n_kv_heads, n_heads / n_kv_heads, static_cast<int>(head_dim),
                            max_n,   scale};
  float* stats = nullptr;
  const size_t n_stats = static_cast<size_t>(n_seqs) * max_n * n_heads * 2;
  check(cudaMallocAsync(reinterpret_cast<void**>(&stats), n_stats * sizeof(float), stream),
        "cudaMallocAsync (attention_backward scratch)");
  detail::dq_kernel<T><<<dim3(n_seqs, static_cast<unsigned>(n_heads), n_row_blocks),
                         detail::kWarps * 32, 0, stream>>>(q, k, v, d_out, dq, seqs, sh, stats);
  const cudaError_t launch1 = cudaGetLastError();
  if (launch1 == cudaSuccess) {
    detail::dkdv_kernel<T>
        <<<dim3(n_seqs, static_cast<unsigned>(n_kv_heads), n_row_blocks), detail::kWarps * 32, 0,
           stream>>>(q, k, v, d_out, dk, dv, seqs, sh, stats);
  }
  const cudaError_t launch2 = cudaGetLastError();
  cudaFreeAsync(stats, stream);  // in stream order, after both kernels
  check(launch1, "attention_backward (dq kernel)");
  check(launch2, "attention_backward (dk/dv kernel)");
}

#define SPINDLE_INSTANTIATE_ATTENTION_BACKWARD(T)                                                  \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, \
                                      int64_t, int64_t, const DenseSeq*, int32_t, int32_t, float,  \
                                      cudaStream_t);
SPINDLE_INSTANTIATE_ATTENTION_BACKWARD(float)
SPINDLE_INSTANTIATE_ATTENTION_BACKWARD(bf16)
#undef SPINDLE_INSTANTIATE_ATTENTION_BACKWARD

}  // namespace spindle::kernels::cuda
