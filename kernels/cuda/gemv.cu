// The skinny (decode) path of cuda::linear<bf16>: see gemv.cuh. One warp per output column n
// reads W's row n once with 16-byte loads and multiplies it with every one of the (at most 8)
// rows of x, which stay in L1; lane partial sums are reduced with shuffles in a fixed order, so
// the result is deterministic. Up to three outputs sharing x (q/k/v, gate/up) run in one launch:
// the warp's global column picks the output, and the column's arithmetic does not depend on it.

#include <cuda_bf16.h>

#include <cstdint>

#include "gemv.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

constexpr int kWarps = 8;  // output columns per block

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// The outputs of one launch, passed by value; column c of the launch belongs to the first
// output o with c < end[o] and is that output's column c - (o > 0 ? end[o - 1] : 0).
struct Outs {
  const bf16* W[kGemvMaxOuts];
  bf16* y[kGemvMaxOuts];
  int64_t ldy[kGemvMaxOuts];
  int64_t end[kGemvMaxOuts];
};

template <int R>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const bf16* __restrict__ x, int64_t ldx, int64_t k, Outs outs, int64_t n_total,
                float beta) {
  const int lane = threadIdx.x & 31;
  int64_t col = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  if (col >= n_total) return;
  // Selects instead of indexing the parameter arrays (a dynamic index would copy them to
  // local memory).
  const bf16* W = outs.W[0];
  bf16* y = outs.y[0];
  int64_t ldy = outs.ldy[0];
  if (col >= outs.end[0]) {
    if (col >= outs.end[1]) {
      col -= outs.end[1];
      W = outs.W[2];
      y = outs.y[2];
      ldy = outs.ldy[2];
    } else {
      col -= outs.end[0];
      W = outs.W[1];
      y = outs.y[1];
      ldy = outs.ldy[1];
    }
  }
  const uint4* w_row = reinterpret_cast<const uint4*>(W + col * k);
  const int64_t n_vec = k / 8;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll 4
  for (int64_t v = lane; v < n_vec; v += 32) {
    float wf[8];
    unpack8(__ldg(w_row + v), wf);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float xf[8];
      unpack8(__ldg(reinterpret_cast<const uint4*>(x + r * ldx) + v), xf);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[r] = fmaf(wf[i], xf[i], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      bf16* out = y + r * ldy + col;
      const float prev = beta != 0.0f ? beta * __bfloat162float(*out) : 0.0f;
      *out = __float2bfloat16(acc[r] + prev);
    }
  }
}

template <int R>
void launch(const bf16* x, int64_t ldx, int64_t k, const Outs& outs, int64_t n_total, float beta,
            cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((n_total + kWarps - 1) / kWarps);
  gemv_kernel<R><<<blocks, kWarps * 32, 0, stream>>>(x, ldx, k, outs, n_total, beta);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool gemv_applies(const bf16* x, int64_t ldx, int64_t rows, int64_t k, const bf16* W) {
  return rows >= 1 && rows <= kGemvMaxRows && k % 8 == 0 && ldx % 8 == 0 && aligned16(x) &&
         aligned16(W);
}

void linear_gemv_multi(const bf16* x, int64_t ldx, int64_t rows, int64_t k, const GemvOut* outs,
                       int count, float beta, cudaStream_t stream) {
  Outs o{};
  int64_t end = 0;
  for (int i = 0; i < kGemvMaxOuts; ++i) {
    // Unused slots repeat the last output with an empty column range.
    const GemvOut& src = outs[i < count ? i : count - 1];
    if (i < count) end += src.n;
    o.W[i] = src.W;
    o.y[i] = src.y;
    o.ldy[i] = src.ldy;
    o.end[i] = end;
  }
  switch (rows) {
    case 1:
      launch<1>(x, ldx, k, o, end, beta, stream);
      break;
    case 2:
      launch<2>(x, ldx, k, o, end, beta, stream);
      break;
    case 3:
      launch<3>(x, ldx, k, o, end, beta, stream);
      break;
    case 4:
      launch<4>(x, ldx, k, o, end, beta, stream);
      break;
    case 5:
      launch<5>(x, ldx, k, o, end, beta, stream);
      break;
    case 6:
      launch<6>(x, ldx, k, o, end, beta, stream);
      break;
    case 7:
      launch<7>(x, ldx, k, o, end, beta, stream);
      break;
    default:
      launch<8>(x, ldx, k, o, end, beta, stream);
      break;
  }
  check_launch("cuda::linear (gemv)");
}

void linear_gemv(const bf16* x, int64_t ldx, int64_t rows, int64_t k, const bf16* W, int64_t n,
                 bf16* y, int64_t ldy, float beta, cudaStream_t stream) {
  const GemvOut out{W, n, y, ldy};
  linear_gemv_multi(x, ldx, rows, k, &out, 1, beta, stream);
}

}  // namespace spindle::kernels::cuda::detail
