// Rotary position embedding on the GPU (rope.h), in place. One thread per (row, head, pair):
// angle = float(pos)·inv_freq[i] in fp32, sincosf (full precision, not the fast intrinsic), then
// the CPU kernel's rotation a' = a·c − b·s, b' = a·s + b·c with s negated for the inverse.

#include "pointwise_common.cuh"
#include "rope_common.cuh"
#include "spindle/kernels/cuda/rope.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

// Rotates dim columns starting at head_off of each of `heads` column blocks of head_stride per
// row (cuda::rope: stride head_dim, offset 0; MLA: each head's last dr columns), then scales the
// rotated pair by `factor` when `scaled` (YaRN's attention factor on MLA's rope columns).
template <class T>
__global__ void rope_kernel(T* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_stride,
                            int64_t head_off, int64_t dim, const int32_t* pos,
                            const float* inv_freq, bool half_style, float sign, bool scaled,
                            float factor) {
  const int64_t half = dim / 2;
  const int64_t per_row = heads * half;
  const int64_t total = rows * per_row;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / per_row;
    const int64_t rem = idx - r * per_row;
    const int64_t h = rem / half;
    const int64_t i = rem - h * half;
    const float angle = static_cast<float>(pos[r]) * inv_freq[i];
    float s;
    float c;
    sincosf(angle, &s, &c);
    s *= sign;
    T* xh = x + r * ld + h * head_stride + head_off;
    T* pa = half_style ? xh + i : xh + 2 * i;
    T* pb = half_style ? xh + i + half : xh + 2 * i + 1;
    const float v0 = to_f32(*pa);
    const float v1 = to_f32(*pb);
    // __fmul_rn keeps each product rounded on its own (no FMA contraction), as on the CPU.
    float a = __fmul_rn(v0, c) - __fmul_rn(v1, s);
    float b = __fmul_rn(v0, s) + __fmul_rn(v1, c);
    if (scaled) {
      a = __fmul_rn(a, factor);
      b = __fmul_rn(b, factor);
    }
    *pa = from_f32<T>(a);
    *pb = from_f32<T>(b);
  }
}

}  // namespace

// Positions live on the device and are not checked here (the CPU kernel's pos >= 0 check is the
// caller's: the engine builds positions on the host).
template <class T>
void rope(T* x, int64_t ld, int64_t rows, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style, bool inverse, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::rope";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && n_heads > 0 && head_dim > 0, kKernel,
                         "rows >= 0, n_heads > 0, head_dim > 0");
  SPINDLE_KERNEL_REQUIRE(head_dim % 2 == 0, kKernel, "head_dim must be even");
  SPINDLE_KERNEL_REQUIRE(ld >= n_heads * head_dim, kKernel, "ld >= n_heads * head_dim");
  SPINDLE_KERNEL_REQUIRE(style == RopeStyle::interleaved || style == RopeStyle::half, kKernel,
                         "unknown RopeStyle");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && pos != nullptr && inv_freq != nullptr, kKernel,
                         "x, pos and inv_freq must be non-null");
  detail::launch_rope(x, ld, rows, n_heads, head_dim, 0, head_dim, pos, inv_freq,
                      style == RopeStyle::half, inverse, 1.0f, stream);
  check_launch(kKernel);
}

namespace detail {

template <class T>
void launch_rope(T* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_stride,
                 int64_t head_off, int64_t dim, const int32_t* pos, const float* inv_freq,
                 bool half_style, bool inverse, float factor, cudaStream_t stream) {
  const int64_t total = rows * heads * (dim / 2);
  if (total == 0) return;
  rope_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
      x, ld, rows, heads, head_stride, head_off, dim, pos, inv_freq, half_style,
      inverse ? -1.0f : 1.0f, factor != 1.0f, factor);
}

template void launch_rope<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                 const int32_t*, const float*, bool, bool, float, cudaStream_t);
template void launch_rope<bf16>(bf16*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                const int32_t*, const float*, bool, bool, float, cudaStream_t);

}  // namespace detail

template void rope<float>(float*, int64_t, int64_t, int64_t, int64_t, const int32_t*, const float*,
                          RopeStyle, bool, cudaStream_t);
template void rope<bf16>(bf16*, int64_t, int64_t, int64_t, int64_t, const int32_t*, const float*,
                         RopeStyle, bool, cudaStream_t);

}  // namespace spindle::kernels::cuda
