// Rotary position embedding on the GPU (rope.h), in place. One thread per (row, head, pair):
// angle = float(pos)·inv_freq[i] in fp32, sincosf (full precision, not the fast intrinsic), then
// the CPU kernel's rotation a' = a·c − b·s, b' = a·s + b·c with s negated for the inverse.

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/rope.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

template <class T>
__global__ void rope_kernel(T* x, int64_t ld, int64_t rows, int64_t n_heads, int64_t head_dim,
                            const int32_t* pos, const float* inv_freq, bool half_style,
                            float sign) {
  const int64_t half = head_dim / 2;
  const int64_t per_row = n_heads * half;
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
    T* xh = x + r * ld + h * head_dim;
    T* pa = half_style ? xh + i : xh + 2 * i;
    T* pb = half_style ? xh + i + half : xh + 2 * i + 1;
    const float v0 = to_f32(*pa);
    const float v1 = to_f32(*pb);
    // __fmul_rn keeps each product rounded on its own (no FMA contraction), as on the CPU.
    *pa = from_f32<T>(__fmul_rn(v0, c) - __fmul_rn(v1, s));
    *pb = from_f32<T>(__fmul_rn(v0, s) + __fmul_rn(v1, c));
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
  const int64_t total = rows * n_heads * (head_dim / 2);
  rope_kernel<T><<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(
      x, ld, rows, n_heads, head_dim, pos, inv_freq, style == RopeStyle::half,
      inverse ? -1.0f : 1.0f);
  check_launch(kKernel);
}

template void rope<float>(float*, int64_t, int64_t, int64_t, int64_t, const int32_t*, const float*,
                          RopeStyle, bool, cudaStream_t);
template void rope<bf16>(bf16*, int64_t, int64_t, int64_t, int64_t, const int32_t*, const float*,
                         RopeStyle, bool, cudaStream_t);

}  // namespace spindle::kernels::cuda
