// Causal GQA attention backward on tensor cores for bf16 training batches: the CUDA-core
// kernels' two passes (attention_backward.cu: the dq kernel leaves each row's lse and
// D = Σ_j P_j·dP_j in the caller's scratch, the dk/dv kernel reads them), with the five tile
// products as WMMA 16×16×16 bf16 products accumulated in fp32:
//   dq kernel:   S = Q·Kᵀ, dP = dO·Vᵀ (both passes), dQ += dS·K
//   dk/dv kernel: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q
// P and dS are rounded to bf16 only as operands of the products that consume them
// (FlashAttention-2's choice); the scores, dP, the softmax statistics, dS itself and every
// accumulator are fp32. Tiles of kTcTile = 64 rows and 4 warps: warp w owns rows
// [16w, 16w + 16) of its block's tile, so the elementwise work (two lanes per row, 32 columns
// each) stays inside a warp and block barriers only guard the shared K/V (Q/dO) tiles. Every sum
// runs in a fixed order (no atomics): results are bitwise reproducible run to run.
// Applies to head_dim multiples of 16 up to 128 with 16-byte aligned operands
// (attention_backward_uses_tensor_cores); the dispatcher sends everything else to the CUDA
// cores. The tile loads and products are attention_tc.cuh's, shared with the prefill.

#include <algorithm>
#include <cstdint>

#include "attention_tc.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

static_assert(2 * score_bytes() >= size_t{kTcWarps} * 16 * kTcMaxHeadDim * sizeof(float),
              "the output staging fits in the two score tiles");
// Both kernels' shared memory, one layout: four bf16 operand tiles | two fp32 score tiles |
// n_half bf16 score tiles | (dk/dv) the query tile's lse and D. The dq kernel holds Q, dO, K, V
// | S, dP | dS; the dk/dv kernel K, V, Q, dO | Sᵀ, dPᵀ | P, dS | lse, D.
struct BwdSmem {
  unsigned char* base;
  size_t ob;  // operand_bytes(hd)
  __device__ bf16* operand(int i) const { return reinterpret_cast<bf16*>(base + i * ob); }
  __device__ float* score(int i) const {
    return reinterpret_cast<float*>(base + 4 * ob + i * score_bytes());
  }
  __device__ bf16* half(int i) const {
    return reinterpret_cast<bf16*>(base + 4 * ob + 2 * score_bytes() + i * half_score_bytes());
  }
  __device__ float* stats() const {
    return reinterpret_cast<float*>(base + 4 * ob + 2 * score_bytes() + 2 * half_score_bytes());
  }
};
size_t bwd_smem_bytes(int hd, int n_half, bool stats) {
  return 4 * operand_bytes(hd) + 2 * score_bytes() + n_half * half_score_bytes() +
         (stats ? align128(2 * kTcTile * sizeof(float)) : 0);
}

// Writes this warp's 16 × hd accumulator rows to global rows [row0, row0 + 16) ∩ [0, n) of
// dst (row stride ld), through `stage` (16·hd floats of shared memory owned by the warp). The
// kernels stage at S + warp·16·hd once the score tiles are dead: the four warps' 32 KiB at
// hd 128 span S and dP (two contiguous 17 KiB regions).
__device__ __forceinline__ void store_rows(const FragC (&acc)[kTcDimFrags], int hd, float* stage,
                                           bf16* __restrict__ dst, int64_t ld, int64_t row0,
                                           int64_t n) {
#pragma unroll
  for (int c2 = 0; c2 < kTcDimFrags; ++c2) {
    if (c2 < hd / 16) wmma::store_matrix_sync(stage + 16 * c2, acc[c2], hd, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  for (int e = lane; e < 16 * hd; e += 32) {
    const int r = e / hd, d = e % hd;
    if (row0 + r < n) dst[(row0 + r) * ld + d] = __float2bfloat16_rn(stage[e]);
  }
  __syncwarp();
}

// A block per (sequence, query head, query tile). Pass 1: online lse and D of each row over its
// keys j <= t. Pass 2: dS = scale·P·(dP − D) and dQ = Σ_j dS_j·K_j.
__global__ void __launch_bounds__(kTcThreads)
    tc_dq_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                 const bf16* __restrict__ d_out, bf16* __restrict__ dq,
                 const DenseSeq* __restrict__ seqs, BwdShape sh, float* __restrict__ stats) {
  extern __shared__ __align__(128) unsigned char smem[];
  const DenseSeq seq = seqs[blockIdx.x];
  const int64_t n = std::min<int64_t>(seq.n, sh.max_n);
  const int64_t t0 = int64_t{blockIdx.z} * kTcTile;
  if (t0 >= n) return;  // block-uniform, before any barrier
  const int64_t h = blockIdx.y;
  const int hd = sh.hd;
  const BwdSmem sm{smem, operand_bytes(hd)};
  bf16* Qs = sm.operand(0);
  bf16* dOs = sm.operand(1);
  bf16* Ks = sm.operand(2);
  bf16* Vs = sm.operand(3);
  float* Ss = sm.score(0);
  float* dPs = sm.score(1);
  bf16* dSs = sm.half(0);
  const int64_t ld_q = sh.n_heads * hd;
  const int64_t ld_kv = sh.n_kv_heads * hd;
  const bf16* Kg = k + seq.row_begin * ld_kv + (h / sh.group) * hd;
  const bf16* Vg = v + seq.row_begin * ld_kv + (h / sh.group) * hd;
  load_operand(Qs, hd, q + seq.row_begin * ld_q + h * hd, ld_q, t0, n);
  load_operand(dOs, hd, d_out + seq.row_begin * ld_q + h * hd, ld_q, t0, n);

  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int r = 16 * warp + lane / 2;  // this lane's tile row
  const int c0 = 32 * (lane % 2);      // and its 32 columns of the score tiles
  const int64_t t = t0 + r;
  const bool row_ok = t < n;
  const int64_t last = std::min<int64_t>(n, t0 + kTcTile) - 1;  // keys 0..last
  const int ldt = tile_ld(hd);
  const bf16* Qw = Qs + (16 * warp) * ldt;
  const bf16* dOw = dOs + (16 * warp) * ldt;
  float* Sw = Ss + (16 * warp) * kLdF;
  float* dPw = dPs + (16 * warp) * kLdF;
  const float* s_row = Ss + r * kLdF + c0;
  const float* dp_row = dPs + r * kLdF + c0;

  // Pass 1.
  float m = -INFINITY, l = 0.0f, dsum = 0.0f;
  for (int64_t j0 = 0; j0 <= last; j0 += kTcTile) {
    __syncthreads();  // the previous K/V tile is consumed
    load_operand(Ks, hd, Kg, ld_kv, j0, n);
    load_operand(Vs, hd, Vg, ld_kv, j0, n);
    __syncthreads();
    product_abt(Qw, Ks, hd, Sw);
    product_abt(dOw, Vs, hd, dPw);
    __syncwarp();
    float tmax = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const int64_t j = j0 + c0 + c;
      if (row_ok && j <= t) tmax = fmaxf(tmax, sh.scale * s_row[c]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(kFullMask, tmax, 1));
    const float m_new = fmaxf(m, tmax);
    const bool any = m_new != -INFINITY;
    float lp = 0.0f, dps = 0.0f;
    for (int c = 0; c < 32; ++c) {
      const int64_t j = j0 + c0 + c;
      const float p = any && row_ok && j <= t ? expf(sh.scale * s_row[c] - m_new) : 0.0f;
      lp += p;
      dps = fmaf(p, dp_row[c], dps);
    }
    lp += __shfl_xor_sync(kFullMask, lp, 1);
    dps += __shfl_xor_sync(kFullMask, dps, 1);
    const float alpha = any ? expf(m - m_new) : 1.0f;
    l = l * alpha + lp;
    dsum = dsum * alpha + dps;
    m = m_new;
    __syncwarp();  // the score rows are read before the next products overwrite them
  }
  const float lse = row_ok ? m + logf(l) : 0.0f;  // row_ok: key 0 gives l >= 1
  const float D = row_ok ? dsum / l : 0.0f;
  if (row_ok && lane % 2 == 0) {
    const int64_t si = stat_index(sh, blockIdx.x, t, h);
    stats[si] = lse;
    stats[si + 1] = D;
  }

  // Pass 2.
  FragC acc[kTcDimFrags];
#pragma unroll
  for (int c2 = 0; c2 < kTcDimFrags; ++c2) wmma::fill_fragment(acc[c2], 0.0f);
  bf16* dS_row = dSs + r * kLdH + c0;
  for (int64_t j0 = 0; j0 <= last; j0 += kTcTile) {
    __syncthreads();
    load_operand(Ks, hd, Kg, ld_kv, j0, n);
    load_operand(Vs, hd, Vg, ld_kv, j0, n);
    __syncthreads();
    product_abt(Qw, Ks, hd, Sw);
    product_abt(dOw, Vs, hd, dPw);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      const int64_t j = j0 + c0 + c;
      const float ds =
          row_ok && j <= t ? sh.scale * expf(sh.scale * s_row[c] - lse) * (dp_row[c] - D) : 0.0f;
      dS_row[c] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
    product_gb(dSs + (16 * warp) * kLdH, Ks, hd, acc);
    __syncwarp();
  }
  __syncthreads();  // every warp is done with the score tiles: they become output staging
  store_rows(acc, hd, Ss + warp * 16 * hd, dq + seq.row_begin * ld_q + h * hd, ld_q, t0 + 16 * warp,
             n);
}

// A block per (sequence, KV head, key tile): over the group's query heads and the query tiles
// from the key tile on, Pᵀ and dSᵀ from the dq kernel's statistics, dV = Σ Pᵀ·dO and
// dK = Σ dSᵀ·Q.
__global__ void __launch_bounds__(kTcThreads)
    tc_dkdv_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                   const bf16* __restrict__ v, const bf16* __restrict__ d_out,
                   bf16* __restrict__ dk, bf16* __restrict__ dv, const DenseSeq* __restrict__ seqs,
                   BwdShape sh, const float* __restrict__ stats) {
  extern __shared__ __align__(128) unsigned char smem[];
  const DenseSeq seq = seqs[blockIdx.x];
  const int64_t n = std::min<int64_t>(seq.n, sh.max_n);
  const int64_t j0 = int64_t{blockIdx.z} * kTcTile;
  if (j0 >= n) return;  // block-uniform, before any barrier
  const int64_t g = blockIdx.y;
  const int hd = sh.hd;
  const BwdSmem sm{smem, operand_bytes(hd)};
  bf16* Ks = sm.operand(0);
  bf16* Vs = sm.operand(1);
  bf16* Qs = sm.operand(2);
  bf16* dOs = sm.operand(3);
  float* Ss = sm.score(0);
  float* dPs = sm.score(1);
  bf16* Ps = sm.half(0);
  bf16* dSs = sm.half(1);
  float* lse_s = sm.stats();
  float* D_s = lse_s + kTcTile;
  const int64_t ld_q = sh.n_heads * hd;
  const int64_t ld_kv = sh.n_kv_heads * hd;
  load_operand(Ks, hd, k + seq.row_begin * ld_kv + g * hd, ld_kv, j0, n);
  load_operand(Vs, hd, v + seq.row_begin * ld_kv + g * hd, ld_kv, j0, n);

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int r = 16 * warp + lane / 2;  // this lane's key row of the tile
  const int c0 = 32 * (lane % 2);      // and its 32 query columns
  const int64_t j = j0 + r;
  const bool key_ok = j < n;
  const int ldt = tile_ld(hd);
  const bf16* Kw = Ks + (16 * warp) * ldt;
  const bf16* Vw = Vs + (16 * warp) * ldt;
  float* Sw = Ss + (16 * warp) * kLdF;
  float* dPw = dPs + (16 * warp) * kLdF;
  const float* s_row = Ss + r * kLdF + c0;
  const float* dp_row = dPs + r * kLdF + c0;
  bf16* p_row = Ps + r * kLdH + c0;
  bf16* ds_row = dSs + r * kLdH + c0;

  FragC acc_k[kTcDimFrags], acc_v[kTcDimFrags];
#pragma unroll
  for (int c2 = 0; c2 < kTcDimFrags; ++c2) {
    wmma::fill_fragment(acc_k[c2], 0.0f);
    wmma::fill_fragment(acc_v[c2], 0.0f);
  }
  for (int64_t hh = 0; hh < sh.group; ++hh) {
    const int64_t h = g * sh.group + hh;
    const bf16* Qg = q + seq.row_begin * ld_q + h * hd;
    const bf16* dOg = d_out + seq.row_begin * ld_q + h * hd;
    for (int64_t t0 = j0; t0 < n; t0 += kTcTile) {
      __syncthreads();  // the previous Q/dO tiles and statistics are consumed
      load_operand(Qs, hd, Qg, ld_q, t0, n);
      load_operand(dOs, hd, dOg, ld_q, t0, n);
      if (tid < kTcTile) {
        const int64_t tq = t0 + tid;
        const int64_t si = stat_index(sh, blockIdx.x, tq < n ? tq : 0, h);
        lse_s[tid] = tq < n ? stats[si] : 0.0f;
        D_s[tid] = tq < n ? stats[si + 1] : 0.0f;
      }
      __syncthreads();
      product_abt(Kw, Qs, hd, Sw);    // Sᵀ rows of this warp's keys
      product_abt(Vw, dOs, hd, dPw);  // dPᵀ
      __syncwarp();
      for (int c = 0; c < 32; ++c) {
        const int col = c0 + c;
        const int64_t tq = t0 + col;
        const bool ok = key_ok && tq < n && tq >= j;
        const float p = ok ? expf(sh.scale * s_row[c] - lse_s[col]) : 0.0f;
        p_row[c] = __float2bfloat16_rn(p);
        ds_row[c] = __float2bfloat16_rn(ok ? sh.scale * p * (dp_row[c] - D_s[col]) : 0.0f);
      }
      __syncwarp();
      product_gb(Ps + (16 * warp) * kLdH, dOs, hd, acc_v);
      product_gb(dSs + (16 * warp) * kLdH, Qs, hd, acc_k);
      __syncwarp();
    }
  }
  __syncthreads();  // every warp is done with the score tiles: they become output staging
  float* stage = Ss + warp * 16 * hd;
  const int64_t row0 = j0 + 16 * warp;
  store_rows(acc_k, hd, stage, dk + seq.row_begin * ld_kv + g * hd, ld_kv, row0, n);
  store_rows(acc_v, hd, stage, dv + seq.row_begin * ld_kv + g * hd, ld_kv, row0, n);
}

}  // namespace

bool tc_backward_applies(const void* const* ptrs, int n_ptrs, int64_t head_dim) {
  return tc_operands_apply(ptrs, n_ptrs, head_dim);
}

void launch_backward_tc(const bf16* q, const bf16* k, const bf16* v, const bf16* d_out, bf16* dq,
                        bf16* dk, bf16* dv, const BwdShape& sh, const DenseSeq* seqs,
                        int32_t n_seqs, float* stats, cudaStream_t stream) {
  const int hd = sh.hd;
  const unsigned n_tiles = static_cast<unsigned>((sh.max_n + kTcTile - 1) / kTcTile);
  const size_t dq_smem = bwd_smem_bytes(hd, /*n_half=*/1, /*stats=*/false);
  const size_t dkdv_smem = bwd_smem_bytes(hd, /*n_half=*/2, /*stats=*/true);
  check(cudaFuncSetAttribute(tc_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(dq_smem)),
        "cudaFuncSetAttribute (attention_backward tensor-core dq kernel)");
  check(cudaFuncSetAttribute(tc_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(dkdv_smem)),
        "cudaFuncSetAttribute (attention_backward tensor-core dk/dv kernel)");
  tc_dq_kernel<<<dim3(n_seqs, static_cast<unsigned>(sh.n_heads), n_tiles), kTcThreads, dq_smem,
                 stream>>>(q, k, v, d_out, dq, seqs, sh, stats);
  check(cudaGetLastError(), "attention_backward (tensor-core dq kernel)");
  tc_dkdv_kernel<<<dim3(n_seqs, static_cast<unsigned>(sh.n_kv_heads), n_tiles), kTcThreads,
                   dkdv_smem, stream>>>(q, k, v, d_out, dk, dv, seqs, sh, stats);
  check(cudaGetLastError(), "attention_backward (tensor-core dk/dv kernel)");
}

}  // namespace spindle::kernels::cuda::detail
