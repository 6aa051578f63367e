#pragma once
// Private to kernels/cuda/attention_*_tc.cu: the tensor-core (WMMA bf16 16×16×16, fp32
// accumulation) building blocks of the attention kernels. A block works on tiles of kTcTile = 64
// rows with kTcWarps = 4 warps; warp w owns rows [16w, 16w + 16) of its block's row tile, so
// per-row elementwise work (two lanes per row, 32 score columns each) stays inside a warp.
// Operand tiles are bf16 in shared memory with row stride tile_ld(hd); score tiles are fp32 with
// row stride kLdF, their bf16 copies (P, dS) row stride kLdH. Everything here is in an anonymous
// namespace: each kernel file gets its own copy.

#include <mma.h>

#include <cstdint>

#include "attention_common.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTcTile = 64;
constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * 32;
constexpr int kTcMaxHeadDim = 128;
constexpr int kTcDimFrags = kTcMaxHeadDim / 16;
constexpr int kLdF = kTcTile + 4;  // float score tiles (WMMA: ldm a multiple of 4)
constexpr int kLdH = kTcTile + 8;  // bf16 P / dS tiles (ldm a multiple of 8)

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Row stride (elements) of the bf16 operand tiles: head_dim + 8 keeps every 16-row fragment
// 32-byte aligned and staggers the rows across banks.
__host__ __device__ constexpr int tile_ld(int hd) {
  return hd + 8;
}

// Byte offsets of the shared-memory carve-up, each 128-byte aligned.
__host__ __device__ constexpr size_t align128(size_t b) {
  return (b + 127) / 128 * 128;
}
__host__ __device__ constexpr size_t operand_bytes(int hd) {
  return align128(size_t{kTcTile} * tile_ld(hd) * sizeof(bf16));
}
__host__ __device__ constexpr size_t score_bytes() {
  return align128(size_t{kTcTile} * kLdF * sizeof(float));
}
__host__ __device__ constexpr size_t half_score_bytes() {
  return align128(size_t{kTcTile} * kLdH * sizeof(bf16));
}
// dst[r, :hd] = src[(row0 + r)·ld, :hd] for row0 + r < n, else zeros; 16-byte copies (hd, ld
// and the head's column offset are multiples of 8 elements, src 16-byte aligned).
__device__ __forceinline__ void load_operand(bf16* dst, int hd, const bf16* __restrict__ src,
                                             int64_t ld, int64_t row0, int64_t n) {
  const int per_row = hd / 8;
  const int ldt = tile_ld(hd);
  for (int e = static_cast<int>(threadIdx.x); e < kTcTile * per_row; e += kTcThreads) {
    const int r = e / per_row, c = (e % per_row) * 8;
    const int64_t row = row0 + r;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (row < n) val = *reinterpret_cast<const uint4*>(src + row * ld + c);
    *reinterpret_cast<uint4*>(dst + r * ldt + c) = val;
  }
}

// out[16, 64] (float, row stride kLdF) = A[16, hd] · B[64, hd]ᵀ for one warp: A rows of this
// warp's tile, B a whole operand tile (row stride tile_ld(hd)).
__device__ __forceinline__ void product_abt(const bf16* A, const bf16* B, int hd, float* out) {
  const int ldt = tile_ld(hd);
  for (int c = 0; c < kTcTile / 16; ++c) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < hd / 16; ++kk) {
      FragA a;
      FragBCol b;  // b(k, n) = B[16c + n, 16kk + k]
      wmma::load_matrix_sync(a, A + kk * 16, ldt);
      wmma::load_matrix_sync(b, B + (16 * c) * ldt + kk * 16, ldt);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(out + 16 * c, acc, kLdF, wmma::mem_row_major);
  }
}

// acc[c2] += G[16, 64] · B[64, hd] for one warp: G this warp's rows of a bf16 P / dS tile (row
// stride kLdH), B a whole operand tile (row-major, stride tile_ld(hd)).
__device__ __forceinline__ void product_gb(const bf16* G, const bf16* B, int hd,
                                           FragC (&acc)[kTcDimFrags]) {
  const int ldt = tile_ld(hd);
  for (int kk = 0; kk < kTcTile / 16; ++kk) {
    FragA a;
    wmma::load_matrix_sync(a, G + kk * 16, kLdH);
#pragma unroll
    for (int c2 = 0; c2 < kTcDimFrags; ++c2) {
      if (c2 < hd / 16) {
        FragBRow b;  // b(k, n) = B[16kk + k, 16c2 + n]
        wmma::load_matrix_sync(b, B + (16 * kk) * ldt + 16 * c2, ldt);
        wmma::mma_sync(acc[c2], a, b, acc[c2]);
      }
    }
  }
}

// Whether the tensor-core kernels take these operands: head_dim a multiple of 16 in [16, 128]
// and every pointer 16-byte aligned (the tiles load 16-byte vectors).
inline bool tc_operands_apply(const void* const* ptrs, int n_ptrs, int64_t head_dim) {
  if (head_dim < 16 || head_dim % 16 != 0 || head_dim > kTcMaxHeadDim) return false;
  for (int i = 0; i < n_ptrs; ++i) {
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16 != 0) return false;
  }
  return true;
}

}  // namespace
}  // namespace spindle::kernels::cuda::detail
