// Causal prefill attention over the paged cache on tensor cores (bf16): FlashAttention-2's
// forward with WMMA tiles. Grid (sequence, query head, query tile of kTcTile = 64 rows), 4 warps;
// warp w owns query rows [16w, 16w + 16). Per key tile of 64 positions (K and V rows gathered
// through the block table with 16-byte loads):
//   S = Q·Kᵀ (WMMA, fp32) → the warp's rows of the score tile;
//   two lanes per row: tile max, m_new, α = exp(m − m_new), P = exp(scale·S − m_new) rounded to
//   bf16 (the P·V operand), l = α·l + Σ P (the rounded values, so the output is an exact convex
//   combination of V rows with the weights P·V used), and the row's O accumulator scaled by α;
//   O += P·V (WMMA, fp32), the accumulator kept in shared memory between tiles.
// Query row i of a tile (position n_past + t0 + i) sees keys [0, n_past + t0 + i]. Scores, the
// softmax statistics and O are fp32; only P is rounded (as the CUDA-core kernel's output is, to
// bf16, once at the end). No atomics: bitwise reproducible. q may alias out when ld_out ==
// ld_q (each block reads its own (row, head) columns of q before it writes the same columns of
// out, and no other block reads them); with different strides it may not.
// Applies to bf16 with head_dim a multiple of 16 up to 128, q and the caches 16-byte aligned and
// ld_q a multiple of 8 (prefill_tc_applies); launch_prefill sends the rest to the CUDA cores.

#include <algorithm>
#include <cstdint>

#include "attention_tc.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

// Row stride (floats) of the O accumulator tile: a multiple of 4 (WMMA float ldm) whose 16-row
// fragments stay 32-byte aligned.
__host__ __device__ constexpr int o_ld(int hd) {
  return hd + 4;
}

// Q, K, V (bf16 operands) | S (fp32) | P (bf16) | O (fp32).
size_t prefill_tc_smem_bytes(int hd) {
  return 3 * operand_bytes(hd) + score_bytes() + half_score_bytes() +
         align128(size_t{kTcTile} * o_ld(hd) * sizeof(float));
}

// Ks/Vs[r, :hd] = the cache rows of positions kv0 + r < kv_end (zeros past kv_end, or where the
// block table points outside the cache: paged_offset's rule).
__device__ __forceinline__ void load_paged_kv(bf16* Ks, bf16* Vs, int hd,
                                              const DevicePagedKv<bf16>& cache,
                                              const int32_t* table, int64_t kv0, int64_t kv_end,
                                              int64_t width, int64_t kv_col) {
  const int per_row = hd / 8;
  const int ldt = tile_ld(hd);
  for (int e = static_cast<int>(threadIdx.x); e < kTcTile * per_row; e += kTcThreads) {
    const int r = e / per_row, c = (e % per_row) * 8;
    const int64_t pos = kv0 + r;
    uint4 kx = make_uint4(0u, 0u, 0u, 0u), vx = kx;
    if (pos < kv_end) {
      const int64_t off = paged_offset(table, pos, cache.block_size, cache.n_blocks, width, kv_col);
      if (off >= 0) {
        kx = *reinterpret_cast<const uint4*>(cache.k + off + c);
        vx = *reinterpret_cast<const uint4*>(cache.v + off + c);
      }
    }
    *reinterpret_cast<uint4*>(Ks + r * ldt + c) = kx;
    *reinterpret_cast<uint4*>(Vs + r * ldt + c) = vx;
  }
}

__global__ void __launch_bounds__(kTcThreads)
    prefill_tc_kernel(const bf16* q, int64_t ld_q, bf16* out, int64_t ld_out,
                      DevicePagedKv<bf16> cache, const DeviceAttnSeq* __restrict__ seqs,
                      const int32_t* __restrict__ block_tables, int64_t group, float scale,
                      bool skip_single) {
  extern __shared__ __align__(128) unsigned char smem[];
  const DeviceAttnSeq seq = seqs[blockIdx.x];
  if (skip_single && seq.n_new == 1) return;  // block-uniform, before any barrier
  const int64_t t0 = int64_t{blockIdx.z} * kTcTile;
  if (t0 >= seq.n_new) return;
  const int64_t n_rows = std::min<int64_t>(kTcTile, seq.n_new - t0);
  const int hd = static_cast<int>(cache.head_dim);
  const int64_t h = blockIdx.y;
  const int64_t width = cache.n_kv_heads * hd;
  const int64_t kv_col = (h / group) * hd;
  const int32_t* table = block_tables + seq.table_offset;
  const int64_t first_pos = int64_t{seq.n_past} + t0;  // position of the tile's row 0
  const int64_t kv_end = first_pos + n_rows;           // keys [0, kv_end)

  const size_t ob = operand_bytes(hd);
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = reinterpret_cast<bf16*>(smem + ob);
  bf16* Vs = reinterpret_cast<bf16*>(smem + 2 * ob);
  float* Ss = reinterpret_cast<float*>(smem + 3 * ob);
  bf16* Ps = reinterpret_cast<bf16*>(smem + 3 * ob + score_bytes());
  float* Os = reinterpret_cast<float*>(smem + 3 * ob + score_bytes() + half_score_bytes());
  const int ldo = o_ld(hd);
  load_operand(Qs, hd, q + seq.row_begin * ld_q + h * hd, ld_q, t0, seq.n_new);
  for (int e = static_cast<int>(threadIdx.x); e < kTcTile * ldo; e += kTcThreads) Os[e] = 0.0f;

  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int r = 16 * warp + lane / 2;    // this lane's tile row
  const int c0 = 32 * (lane % 2);        // its 32 score columns
  const int d0 = (hd / 2) * (lane % 2);  // and its half of the row's O columns
  const bool row_ok = r < n_rows;
  const int64_t last_key = first_pos + r;  // inclusive
  const int ldt = tile_ld(hd);
  const bf16* Qw = Qs + (16 * warp) * ldt;
  float* Sw = Ss + (16 * warp) * kLdF;
  const float* s_row = Ss + r * kLdF + c0;
  bf16* p_row = Ps + r * kLdH + c0;
  float* o_row = Os + r * ldo;

  float m = -INFINITY, l = 0.0f;
  for (int64_t kv0 = 0; kv0 < kv_end; kv0 += kTcTile) {
    __syncthreads();  // the previous K/V tile is consumed (and Q, O are initialised)
    load_paged_kv(Ks, Vs, hd, cache, table, kv0, kv_end, width, kv_col);
    __syncthreads();
    product_abt(Qw, Ks, hd, Sw);
    __syncwarp();
    float tmax = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      if (row_ok && kv0 + c0 + c <= last_key) tmax = fmaxf(tmax, scale * s_row[c]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(kFullMask, tmax, 1));
    const float m_new = fmaxf(m, tmax);
    const bool any = m_new != -INFINITY;  // key 0 is visible to every valid row
    float lp = 0.0f;
    for (int c = 0; c < 32; ++c) {
      const bool visible = any && row_ok && kv0 + c0 + c <= last_key;
      const bf16 p = __float2bfloat16_rn(visible ? expf(scale * s_row[c] - m_new) : 0.0f);
      p_row[c] = p;
      lp += __bfloat162float(p);
    }
    lp += __shfl_xor_sync(kFullMask, lp, 1);
    const float alpha = any ? expf(m - m_new) : 1.0f;  // 0 on the row's first tile
    l = l * alpha + lp;
    m = m_new;
    for (int d = d0; d < d0 + hd / 2; ++d) o_row[d] *= alpha;
    __syncwarp();  // P and the scaled O rows are in place before the warp's products
    FragA pa[kTcTile / 16];  // this warp's P rows, loaded once for every O column block
#pragma unroll
    for (int kk = 0; kk < kTcTile / 16; ++kk) {
      wmma::load_matrix_sync(pa[kk], Ps + (16 * warp) * kLdH + 16 * kk, kLdH);
    }
#pragma unroll
    for (int c2 = 0; c2 < kTcDimFrags; ++c2) {
      if (c2 < hd / 16) {
        FragC acc;
        float* o_frag = Os + (16 * warp) * ldo + 16 * c2;
        wmma::load_matrix_sync(acc, o_frag, ldo, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < kTcTile / 16; ++kk) {
          FragBRow b;  // b(k, n) = V[16kk + k, 16c2 + n]
          wmma::load_matrix_sync(b, Vs + (16 * kk) * ldt + 16 * c2, ldt);
          wmma::mma_sync(acc, pa[kk], b, acc);
        }
        wmma::store_matrix_sync(o_frag, acc, ldo, wmma::mem_row_major);
      }
    }
    __syncwarp();  // the O rows are stored before the lanes read or scale them again
  }
  if (!row_ok) return;  // no barrier follows
  bf16* dst = out + (seq.row_begin + t0 + r) * ld_out + h * hd;
  const float inv_l = 1.0f / l;
  for (int d = d0; d < d0 + hd / 2; ++d) dst[d] = __float2bfloat16_rn(o_row[d] * inv_l);
}

}  // namespace

bool prefill_tc_applies(const bf16* q, int64_t ld_q, const DevicePagedKv<bf16>& cache) {
  const void* ptrs[] = {q, cache.k, cache.v};
  return ld_q % 8 == 0 && tc_operands_apply(ptrs, 3, cache.head_dim);
}

void launch_prefill_tc(const bf16* q, int64_t ld_q, bf16* out, int64_t ld_out, int64_t n_heads,
                       const DevicePagedKv<bf16>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                       const int32_t* block_tables, int32_t max_new, float scale, bool skip_single,
                       cudaStream_t stream) {
  const int hd = static_cast<int>(cache.head_dim);
  const unsigned n_tiles = static_cast<unsigned>((max_new + kTcTile - 1) / kTcTile);
  const size_t smem = prefill_tc_smem_bytes(hd);
  check(cudaFuncSetAttribute(prefill_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)),
        "cudaFuncSetAttribute (attention_prefill tensor-core kernel)");
  prefill_tc_kernel<<<dim3(n_seqs, static_cast<unsigned>(n_heads), n_tiles), kTcThreads, smem,
                      stream>>>(q, ld_q, out, ld_out, cache, seqs, block_tables,
                                n_heads / cache.n_kv_heads, scale, skip_single);
  check_launch("attention_prefill (tensor cores)");
}

}  // namespace spindle::kernels::cuda::detail
