// Fused q/k norm + RoPE + KV-cache write (qk_rope.h). One thread block per (row, head) of the
// row's n_heads q heads, n_kv_heads k heads and n_kv_heads v heads; blockDim is the one
// cuda::rmsnorm picks for a row of head_dim (norm.cu's threads_for), so the sum of squares runs
// through the same per-thread loop and block tree and the norm is bitwise norm.cu's. The normed
// head, rounded to T as rmsnorm stores it, goes to shared memory; the first head_dim/2 threads
// then rotate pairs with rope.cu's expressions and write the head back (q, k) and to the cache
// (k, v) with attention.cu's slot rule.

#include <algorithm>

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/qk_rope.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::block_sum;
using detail::from_f32;
using detail::to_f32;

constexpr int64_t kMaxHeadDim = 1024;  // shared-memory head buffer (head_dim <= 256 in practice)

// Must equal norm.cu's threads_for: the reduction tree depends on the block size.
int threads_for(int64_t n) {
  const int64_t t = (n + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : (t > 256 ? 256 : t));
}

struct Params {
  int64_t ld_q, ld_kv, rows, n_heads, n_kv_heads, head_dim;
  float eps;
  bool half_style;
};

template <class T>
__global__ void __launch_bounds__(256)
    qk_rope_kernel(T* q, T* k, const T* v, const float* q_norm, const float* k_norm,
                   const int32_t* pos, const float* inv_freq, DevicePagedKv<T> cache,
                   const int64_t* slot, Params p) {
  __shared__ T head[kMaxHeadDim];
  const int64_t hd = p.head_dim;
  const int64_t half = hd / 2;
  const int64_t heads_per_row = p.n_heads + 2 * p.n_kv_heads;
  const int64_t width = p.n_kv_heads * hd;
  const int64_t n_slots = cache.n_blocks * cache.block_size;
  const int64_t total = p.rows * heads_per_row;
  // Block-uniform loop (every thread of a block takes the same iterations): the __syncthreads
  // inside are safe.
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
    const int64_t r = b / heads_per_row;
    const int64_t h = b - r * heads_per_row;
    const int64_t sl = slot[r];
    const bool in_cache = sl >= 0 && sl < n_slots;
    if (h >= p.n_heads + p.n_kv_heads) {  // a v head: copied to the cache
      const int64_t c0 = (h - p.n_heads - p.n_kv_heads) * hd;
      if (in_cache) {
        for (int64_t j = threadIdx.x; j < hd; j += blockDim.x) {
          cache.v[sl * width + c0 + j] = v[r * p.ld_kv + c0 + j];
        }
      }
      continue;
    }
    const bool is_q = h < p.n_heads;
    T* xh = is_q ? q + r * p.ld_q + h * hd : k + r * p.ld_kv + (h - p.n_heads) * hd;
    const float* w = is_q ? q_norm : k_norm;
    if (w != nullptr) {
      // norm.cu's rmsnorm_kernel for one row of n = head_dim.
      float ss = 0.0f;
      for (int64_t j = threadIdx.x; j < hd; j += blockDim.x) {
        const float x = to_f32(xh[j]);
        ss += x * x;
      }
      ss = block_sum(ss);
      ss /= static_cast<float>(hd);
      ss += p.eps;
      const float inv = 1.0f / sqrtf(ss);
      for (int64_t j = threadIdx.x; j < hd; j += blockDim.x) {
        head[j] = from_f32<T>(w[j] * (inv * to_f32(xh[j])));
      }
    } else {
      for (int64_t j = threadIdx.x; j < hd; j += blockDim.x) head[j] = xh[j];
    }
    __syncthreads();
    // rope.cu's rope_kernel (forward: sign +1) for pair i of this head.
    const float angle_pos = static_cast<float>(pos[r]);
    T* cache_k = is_q || !in_cache ? nullptr : cache.k + sl * width + (h - p.n_heads) * hd;
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      const float angle = angle_pos * inv_freq[i];
      float s;
      float c;
      sincosf(angle, &s, &c);
      const int64_t ia = p.half_style ? i : 2 * i;
      const int64_t ib = p.half_style ? i + half : 2 * i + 1;
      const float v0 = to_f32(head[ia]);
      const float v1 = to_f32(head[ib]);
      const T a = from_f32<T>(__fmul_rn(v0, c) - __fmul_rn(v1, s));
      const T bb = from_f32<T>(__fmul_rn(v0, s) + __fmul_rn(v1, c));
      xh[ia] = a;
      xh[ib] = bb;
      if (cache_k != nullptr) {
        cache_k[ia] = a;
        cache_k[ib] = bb;
      }
    }
    __syncthreads();  // `head` is reused by the block's next (row, head)
  }
}

}  // namespace

template <class T>
void qk_norm_rope_kv_write(T* q, int64_t ld_q, int64_t n_heads, T* k, const T* v, int64_t ld_kv,
                           int64_t rows, const float* q_norm, const float* k_norm, float eps,
                           const int32_t* pos, const float* inv_freq, RopeStyle style,
                           const DevicePagedKv<T>& cache, const int64_t* slot,
                           cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::qk_norm_rope_kv_write";
  SPINDLE_KERNEL_REQUIRE(cache.k != nullptr && cache.v != nullptr, kKernel,
                         "cache.k and cache.v must be non-null");
  SPINDLE_KERNEL_REQUIRE(cache.n_blocks > 0 && cache.block_size > 0, kKernel,
                         "cache.n_blocks > 0 and cache.block_size > 0");
  const int64_t n_kv = cache.n_kv_heads, hd = cache.head_dim;
  SPINDLE_KERNEL_REQUIRE(n_kv > 0 && hd > 0 && hd % 2 == 0 && hd <= kMaxHeadDim, kKernel,
                         "cache.n_kv_heads > 0, cache.head_dim even and in (0, 1024]");
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && n_heads > 0 && n_heads % n_kv == 0, kKernel,
                         "rows >= 0, n_heads a positive multiple of n_kv_heads");
  SPINDLE_KERNEL_REQUIRE(ld_q >= n_heads * hd && ld_kv >= n_kv * hd, kKernel,
                         "ld_q >= n_heads * head_dim and ld_kv >= n_kv_heads * head_dim");
  SPINDLE_KERNEL_REQUIRE((q_norm == nullptr) == (k_norm == nullptr), kKernel,
                         "q_norm and k_norm both null or both set");
  SPINDLE_KERNEL_REQUIRE(style == RopeStyle::interleaved || style == RopeStyle::half, kKernel,
                         "unknown RopeStyle");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(q != nullptr && k != nullptr && v != nullptr && pos != nullptr &&
                             inv_freq != nullptr && slot != nullptr,
                         kKernel, "q, k, v, pos, inv_freq and slot must be non-null");
  const int64_t total = rows * (n_heads + 2 * n_kv);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(total, int64_t{1} << 20));
  const Params p{ld_q, ld_kv, rows, n_heads, n_kv, hd, eps, style == RopeStyle::half};
  qk_rope_kernel<T><<<blocks, threads_for(hd), 0, stream>>>(q, k, v, q_norm, k_norm, pos, inv_freq,
                                                            cache, slot, p);
  check_launch(kKernel);
}

template void qk_norm_rope_kv_write<float>(float*, int64_t, int64_t, float*, const float*, int64_t,
                                           int64_t, const float*, const float*, float,
                                           const int32_t*, const float*, RopeStyle,
                                           const DevicePagedKv<float>&, const int64_t*,
                                           cudaStream_t);
template void qk_norm_rope_kv_write<bf16>(bf16*, int64_t, int64_t, bf16*, const bf16*, int64_t,
                                          int64_t, const float*, const float*, float,
                                          const int32_t*, const float*, RopeStyle,
                                          const DevicePagedKv<bf16>&, const int64_t*, cudaStream_t);

}  // namespace spindle::kernels::cuda
