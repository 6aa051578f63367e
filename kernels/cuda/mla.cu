// Multi-head Latent Attention's own kernels (mla.h).
//
// mla_rope: cuda::rope's kernel itself (rope_common.cuh) on the last dr columns of each head, in
// place: rope.cu's arithmetic (fp32 angle = float(pos)·inv_freq[i], full-precision sincosf,
// __fmul_rn products so no FMA contracts them, s negated for the inverse; half pairs (i, i + dr/2),
// interleaved pairs (2i, 2i+1)), then each rotated value times `factor` (__fmul_rn, skipped when
// factor == 1), rounded once to T. In fp32 this is bitwise cuda::rope on the head's tail followed
// by an fp32 multiply, which is the CPU engine's mla_rope (kernels::rope, then *= rope_factor_).
//
// mla_lora_absorb_q / mla_lora_absorb_out: one block of kAbsorbThreads threads per (row, head)
// (gridDim = segs.rows × heads). Each block finds its row's segment with lora_common.cuh's
// row_adapter (binary search over the device segments; rows in no segment, base-only segments
// and rank-0 slots return before any write), builds u[0, r) in shared memory with fp32
// accumulation in an order fixed by r alone (no atomics: bitwise reproducible), then each
// thread adds c·Σ_j (...)·u[j] to its output columns (a strided loop over them).
// - absorb_q: u[j] = Σ_i q[i]·B_K[i, j]. Thread x owns column j = x mod r̂ (r̂ = r rounded up to
//   a power of two) and the rows i ≡ x / r̂ (mod 128 / r̂), so a warp reads contiguous runs of a
//   B row; the 128 / r̂ partial sums of each j are then added in slice order by thread j. Then
//   q_abs[k] += c·Σ_j u[j]·A[j, k] for k < R (A rows read coalesced across threads).
// - absorb_out: u[j] = Σ_k A[j, k]·o_lat[k]: warp w owns j = w, w + 4, ..., its lanes stride
//   the A row (coalesced) and warp_sum reduces them in a fixed shuffle order. Then
//   out[i] += c·Σ_j B_V[i, j]·u[j] for i < dv (each thread walks its B row).
// Ranks are bounded by lora_common.cuh's kMaxRank (128, the shared u buffer), checked on the
// host as every SGMV entry point does.
//
// sum_heads, copy_head_cols: grid-stride elementwise loops; sum_heads adds the heads in order
// 0, 1, ... into an fp32 accumulator that starts at 0.0f (as the CPU engine's dk_pe loop).
//
// Contract checks are on the host, before any device access (a call with bad arguments throws
// without touching the GPU); calls with nothing to do return before the null-pointer checks.

#include <cstdint>

#include "lora_common.cuh"
#include "pointwise_common.cuh"
#include "rope_common.cuh"
#include "spindle/kernels/cuda/mla.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;
using lora_detail::kMaxRank;
using lora_detail::row_adapter;
using lora_detail::RowAdapter;

constexpr int kPointwiseThreads = 256;
constexpr int kAbsorbThreads = 128;
constexpr int kAbsorbWarps = kAbsorbThreads / 32;
static_assert(kAbsorbThreads >= kMaxRank, "absorb_q: one thread per rank column at least");
static_assert((kAbsorbThreads & (kAbsorbThreads - 1)) == 0, "absorb_q slices: a power of two");

// ---------------------------------------------------------------------------------------------
// Absorbed LoRA of kv_b_proj

struct AbsorbQArgs {
  int64_t ld_q, qw, dn, kvw, lw, ld_abs;
};

template <class T>
__global__ void __launch_bounds__(kAbsorbThreads)
    mla_absorb_q_kernel(const T* __restrict__ q, T* __restrict__ q_abs,
                        const __grid_constant__ DeviceLoraSlots slots,
                        const __grid_constant__ DeviceSegments segs, AbsorbQArgs p) {
  const int64_t t = blockIdx.x;
  const int64_t h = blockIdx.y;
  const RowAdapter ad = row_adapter(slots, segs, t);
  const int r = ad.rank;
  if (r == 0) return;  // block-uniform, before the barriers

  __shared__ float part[kAbsorbThreads];
  __shared__ float u[kMaxRank];
  const int64_t mr = slots.max_rank;
  const int64_t R = slots.d_in;
  const float c = slots.scale[ad.slot];
  const float* A = slots.A + int64_t{ad.slot} * mr * R;
  const float* B = slots.B + int64_t{ad.slot} * slots.d_out * mr + h * p.kvw * mr;  // B_K[h]
  const T* qn = q + t * p.ld_q + h * p.qw;

  // u[j] = Σ_i qn[i]·B_K[i, j]: thread x sums column j = x mod rp over rows i = slice, slice +
  // n_slices, ...; thread j then adds the slices' partial sums in slice order.
  int rp = 1;
  while (rp < r) rp <<= 1;
  const int n_slices = kAbsorbThreads / rp;
  const int x = static_cast<int>(threadIdx.x);
  const int j = x & (rp - 1);
  const int slice = x / rp;
  float acc = 0.0f;
  if (j < r) {
    for (int64_t i = slice; i < p.dn; i += n_slices) acc += to_f32(qn[i]) * __ldg(B + i * mr + j);
  }
  part[x] = acc;
  __syncthreads();
  if (x < r) {
    float s = 0.0f;
    for (int g = 0; g < n_slices; ++g) s += part[g * rp + x];
    u[x] = s;
  }
  __syncthreads();

  // q_abs[t, h·lw + k] += c·Σ_j u[j]·A[j, k], k < R.
  T* out = q_abs + t * p.ld_abs + h * p.lw;
  for (int64_t k = x; k < R; k += kAbsorbThreads) {
    float s = 0.0f;
    for (int jj = 0; jj < r; ++jj) s += u[jj] * __ldg(A + jj * R + k);
    out[k] = from_f32<T>(to_f32(out[k]) + c * s);
  }
}

struct AbsorbOutArgs {
  int64_t ld_lat, lw, dn, dv, kvw, ld_out;
};

template <class T>
__global__ void __launch_bounds__(kAbsorbThreads)
    mla_absorb_out_kernel(const T* __restrict__ o_lat, T* __restrict__ out,
                          const __grid_constant__ DeviceLoraSlots slots,
                          const __grid_constant__ DeviceSegments segs, AbsorbOutArgs p) {
  const int64_t t = blockIdx.x;
  const int64_t h = blockIdx.y;
  const RowAdapter ad = row_adapter(slots, segs, t);
  const int r = ad.rank;
  if (r == 0) return;  // block-uniform, before the barrier

  __shared__ float u[kMaxRank];
  const int64_t mr = slots.max_rank;
  const int64_t R = slots.d_in;
  const float c = slots.scale[ad.slot];
  const float* A = slots.A + int64_t{ad.slot} * mr * R;
  const float* B =
      slots.B + int64_t{ad.slot} * slots.d_out * mr + (h * p.kvw + p.dn) * mr;  // B_V[h]
  const T* o = o_lat + t * p.ld_lat + h * p.lw;

  // u[j] = Σ_k A[j, k]·o[k]: warp w owns j = w, w + kAbsorbWarps, ...
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  for (int j = warp; j < r; j += kAbsorbWarps) {
    const float* Aj = A + j * R;
    float s = 0.0f;
    for (int64_t k = lane; k < R; k += 32) s += __ldg(Aj + k) * to_f32(o[k]);
    s = detail::warp_sum(s);
    if (lane == 0) u[j] = s;
  }
  __syncthreads();

  // out[t, h·dv + i] += c·Σ_j B_V[i, j]·u[j], i < dv.
  T* y = out + t * p.ld_out + h * p.dv;
  for (int64_t i = threadIdx.x; i < p.dv; i += kAbsorbThreads) {
    const float* Bi = B + i * mr;
    float s = 0.0f;
    for (int jj = 0; jj < r; ++jj) s += __ldg(Bi + jj) * u[jj];
    y[i] = from_f32<T>(to_f32(y[i]) + c * s);
  }
}

// ---------------------------------------------------------------------------------------------
// sum_heads, copy_head_cols

template <class T>
__global__ void sum_heads_kernel(const T* __restrict__ x, int64_t ld, int64_t rows, int64_t heads,
                                 int64_t w, int64_t off, int64_t n, T* __restrict__ out,
                                 int64_t ld_out) {
  const int64_t total = rows * n;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / n;
    const int64_t i = idx - t * n;
    const T* xt = x + t * ld + off + i;
    float acc = 0.0f;
    for (int64_t h = 0; h < heads; ++h) acc += to_f32(xt[h * w]);
    out[t * ld_out + i] = from_f32<T>(acc);
  }
}

template <class T>
__global__ void copy_head_cols_kernel(const T* __restrict__ src, int64_t ld_src, int64_t src_w,
                                      int64_t src_off, T* __restrict__ dst, int64_t ld_dst,
                                      int64_t dst_w, int64_t dst_off, int64_t rows, int64_t heads,
                                      int64_t n) {
  const int64_t per_row = heads * n;
  const int64_t total = rows * per_row;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / per_row;
    const int64_t rem = idx - t * per_row;
    const int64_t h = rem / n;
    const int64_t i = rem - h * n;
    dst[t * ld_dst + h * dst_w + dst_off + i] = src[t * ld_src + h * src_w + src_off + i];
  }
}

// Checks shared by the two absorbed-LoRA entry points (slots, segments, the kv_b layout).
void check_absorb_common(const DeviceLoraSlots& slots, const DeviceSegments& segs, int64_t heads,
                         int64_t kvw, int64_t lw, const char* kernel) {
  lora_detail::check_common(slots, segs, kernel);  // max_rank in [1, kMaxRank], sizes, segments
  SPINDLE_KERNEL_REQUIRE(heads > 0 && heads <= 65535, kernel, "heads must lie in [1, 65535]");
  SPINDLE_KERNEL_REQUIRE(kvw > 0 && slots.d_out == heads * kvw, kernel,
                         "slots.d_out must equal heads * kvw");
  SPINDLE_KERNEL_REQUIRE(lw >= slots.d_in, kernel, "lw >= R (slots.d_in)");
}

}  // namespace

template <class T>
void mla_rope(T* x, int64_t ld, int64_t rows, int64_t heads, int64_t w, int64_t dr,
              const int32_t* pos, const float* inv_freq, RopeStyle style, bool inverse,
              float factor, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::mla_rope";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && heads > 0 && w > 0, kKernel, "rows >= 0, heads > 0, w > 0");
  SPINDLE_KERNEL_REQUIRE(dr > 0 && dr <= w && dr % 2 == 0, kKernel, "dr even, 0 < dr <= w");
  SPINDLE_KERNEL_REQUIRE(ld >= heads * w, kKernel, "ld >= heads * w");
  SPINDLE_KERNEL_REQUIRE(style == RopeStyle::interleaved || style == RopeStyle::half, kKernel,
                         "unknown RopeStyle");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && pos != nullptr && inv_freq != nullptr, kKernel,
                         "x, pos and inv_freq must be non-null");
  // cuda::rope's kernel, on each head's last dr columns, with the factor.
  detail::launch_rope(x, ld, rows, heads, w, w - dr, dr, pos, inv_freq, style == RopeStyle::half,
                      inverse, factor, stream);
  check_launch(kKernel);
}

template <class T>
void mla_lora_absorb_q(const T* q, int64_t ld_q, int64_t heads, int64_t qw, int64_t dn, int64_t kvw,
                       int64_t lw, const DeviceLoraSlots& slots, const DeviceSegments& segs,
                       T* q_abs, int64_t ld_abs, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::mla_lora_absorb_q";
  check_absorb_common(slots, segs, heads, kvw, lw, kKernel);
  SPINDLE_KERNEL_REQUIRE(dn > 0 && dn <= qw && dn <= kvw, kKernel, "0 < dn <= qw and dn <= kvw");
  SPINDLE_KERNEL_REQUIRE(ld_q >= heads * qw, kKernel, "ld_q >= heads * qw");
  SPINDLE_KERNEL_REQUIRE(ld_abs >= heads * lw, kKernel, "ld_abs >= heads * lw");
  if (!lora_detail::has_work(segs)) return;
  SPINDLE_KERNEL_REQUIRE(q != nullptr && q_abs != nullptr && slots.A != nullptr &&
                             slots.B != nullptr && slots.rank != nullptr && slots.scale != nullptr,
                         kKernel,
                         "q, q_abs, slots.A, slots.B, slots.rank and slots.scale must be non-null");
  const dim3 grid(static_cast<unsigned>(segs.rows), static_cast<unsigned>(heads));
  mla_absorb_q_kernel<T><<<grid, kAbsorbThreads, 0, stream>>>(
      q, q_abs, slots, segs, AbsorbQArgs{ld_q, qw, dn, kvw, lw, ld_abs});
  check_launch(kKernel);
}

template <class T>
void mla_lora_absorb_out(const T* o_lat, int64_t ld_lat, int64_t heads, int64_t lw, int64_t dn,
                         int64_t dv, int64_t kvw, const DeviceLoraSlots& slots,
                         const DeviceSegments& segs, T* out, int64_t ld_out, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::mla_lora_absorb_out";
  check_absorb_common(slots, segs, heads, kvw, lw, kKernel);
  SPINDLE_KERNEL_REQUIRE(dn > 0 && dv > 0 && dn + dv == kvw, kKernel,
                         "dn > 0, dv > 0 and kvw == dn + dv");
  SPINDLE_KERNEL_REQUIRE(ld_lat >= heads * lw, kKernel, "ld_lat >= heads * lw");
  SPINDLE_KERNEL_REQUIRE(ld_out >= heads * dv, kKernel, "ld_out >= heads * dv");
  if (!lora_detail::has_work(segs)) return;
  SPINDLE_KERNEL_REQUIRE(o_lat != nullptr && out != nullptr && slots.A != nullptr &&
                             slots.B != nullptr && slots.rank != nullptr && slots.scale != nullptr,
                         kKernel,
                         "o_lat, out, slots.A, slots.B, slots.rank and slots.scale must be "
                         "non-null");
  const dim3 grid(static_cast<unsigned>(segs.rows), static_cast<unsigned>(heads));
  mla_absorb_out_kernel<T><<<grid, kAbsorbThreads, 0, stream>>>(
      o_lat, out, slots, segs, AbsorbOutArgs{ld_lat, lw, dn, dv, kvw, ld_out});
  check_launch(kKernel);
}

template <class T>
void sum_heads(const T* x, int64_t ld, int64_t rows, int64_t heads, int64_t w, int64_t off,
               int64_t n, T* out, int64_t ld_out, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::sum_heads";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && heads > 0 && w > 0 && n >= 0, kKernel,
                         "rows >= 0, heads > 0, w > 0, n >= 0");
  SPINDLE_KERNEL_REQUIRE(off >= 0 && off + n <= w, kKernel, "off >= 0 and off + n <= w");
  SPINDLE_KERNEL_REQUIRE(ld >= heads * w, kKernel, "ld >= heads * w");
  SPINDLE_KERNEL_REQUIRE(ld_out >= n, kKernel, "ld_out >= n");
  if (rows == 0 || n == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && out != nullptr, kKernel, "x and out must be non-null");
  const int64_t total = rows * n;
  sum_heads_kernel<T><<<detail::grid_for(total, kPointwiseThreads), kPointwiseThreads, 0, stream>>>(
      x, ld, rows, heads, w, off, n, out, ld_out);
  check_launch(kKernel);
}

template <class T>
void copy_head_cols(const T* src, int64_t ld_src, int64_t src_w, int64_t src_off, T* dst,
                    int64_t ld_dst, int64_t dst_w, int64_t dst_off, int64_t rows, int64_t heads,
                    int64_t n, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::copy_head_cols";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && heads > 0 && n >= 0 && src_w >= 0 && dst_w > 0, kKernel,
                         "rows >= 0, heads > 0, n >= 0, src_w >= 0, dst_w > 0");
  // src_w 0: every head reads the same columns (MLA's shared rope key into each padded head).
  SPINDLE_KERNEL_REQUIRE(src_off >= 0 && src_off + n <= (src_w > 0 ? src_w : ld_src), kKernel,
                         "src_off >= 0 and src_off + n <= src_w (ld_src when src_w is 0)");
  SPINDLE_KERNEL_REQUIRE(dst_off >= 0 && dst_off + n <= dst_w, kKernel,
                         "dst_off >= 0 and dst_off + n <= dst_w");
  SPINDLE_KERNEL_REQUIRE(ld_src >= heads * src_w, kKernel, "ld_src >= heads * src_w");
  SPINDLE_KERNEL_REQUIRE(ld_dst >= heads * dst_w, kKernel, "ld_dst >= heads * dst_w");
  if (rows == 0 || n == 0) return;
  SPINDLE_KERNEL_REQUIRE(src != nullptr && dst != nullptr, kKernel, "src and dst must be non-null");
  const int64_t total = rows * heads * n;
  copy_head_cols_kernel<T>
      <<<detail::grid_for(total, kPointwiseThreads), kPointwiseThreads, 0, stream>>>(
          src, ld_src, src_w, src_off, dst, ld_dst, dst_w, dst_off, rows, heads, n);
  check_launch(kKernel);
}

#define SPINDLE_MLA_INSTANTIATE(T)                                                                 \
  template void mla_rope<T>(T*, int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*,       \
                            const float*, RopeStyle, bool, float, cudaStream_t);                   \
  template void mla_lora_absorb_q<T>(const T*, int64_t, int64_t, int64_t, int64_t, int64_t,        \
                                     int64_t, const DeviceLoraSlots&, const DeviceSegments&, T*,   \
                                     int64_t, cudaStream_t);                                       \
  template void mla_lora_absorb_out<T>(const T*, int64_t, int64_t, int64_t, int64_t, int64_t,      \
                                       int64_t, const DeviceLoraSlots&, const DeviceSegments&, T*, \
                                       int64_t, cudaStream_t);                                     \
  template void sum_heads<T>(const T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, T*,   \
                             int64_t, cudaStream_t);                                               \
  template void copy_head_cols<T>(const T*, int64_t, int64_t, int64_t, T*, int64_t, int64_t,       \
                                  int64_t, int64_t, int64_t, int64_t, cudaStream_t);

SPINDLE_MLA_INSTANTIATE(float)
SPINDLE_MLA_INSTANTIATE(bf16)
#undef SPINDLE_MLA_INSTANTIATE

}  // namespace spindle::kernels::cuda
