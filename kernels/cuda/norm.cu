// RMSNorm forward and backward on the GPU (norm.h). One thread block per row (grid-stride over
// rows); the row's sum in fp32 through a fixed block tree, then the CPU kernel's per-element
// expressions: inv = 1/sqrt(ss/n + eps), y = w·(inv·x); dx = inv·t − (inv³/n·s)·x [+ β·dx].

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::block_sum;
using detail::from_f32;
using detail::to_f32;

// Threads per row: a multiple of 32 covering short rows (q/k norms: n = head_dim) without idle
// warps, at most 256.
int threads_for(int64_t n) {
  const int64_t t = (n + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : (t > 256 ? 256 : t));
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < 65535 ? rows : 65535);
}

// In place (y == x) is safe: each element is read and written by the same thread, and every
// read of the row happens before the block-wide sum that precedes the writes.
template <class T>
__global__ void __launch_bounds__(256)
    rmsnorm_kernel(const T* x, int64_t ld_x, const float* w, T* y, int64_t ld_y, int64_t rows,
                   int64_t n, float eps, float* inv_rms) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * ld_x;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float v = to_f32(xr[j]);
      ss += v * v;
    }
    ss = block_sum(ss);
    ss /= static_cast<float>(n);
    ss += eps;
    const float inv = 1.0f / sqrtf(ss);
    if (inv_rms != nullptr && threadIdx.x == 0) inv_rms[r] = inv;
    T* yr = y + r * ld_y;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      yr[j] = from_f32<T>(w[j] * (inv * to_f32(xr[j])));
    }
  }
}

template <class T>
__global__ void __launch_bounds__(256)
    rmsnorm_backward_kernel(const T* x, int64_t ld_x, const float* w, const float* inv_rms,
                            const T* dy, int64_t ld_dy, T* dx, int64_t ld_dx, int64_t rows,
                            int64_t n, float beta_dx) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * ld_x;
    const T* dyr = dy + r * ld_dy;
    T* dxr = dx + r * ld_dx;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      s += (w[j] * to_f32(dyr[j])) * to_f32(xr[j]);
    }
    s = block_sum(s);
    const float inv = inv_rms[r];
    const float coef = inv * inv * inv * inv_n * s;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float t = w[j] * to_f32(dyr[j]);
      float v = inv * t - coef * to_f32(xr[j]);
      if (beta_dx != 0.0f) v += beta_dx * to_f32(dxr[j]);  // dx may be uninitialised when β = 0
      dxr[j] = from_f32<T>(v);
    }
  }
}

}  // namespace

template <class T>
void rmsnorm(const T* x, int64_t ld_x, const float* w, T* y, int64_t ld_y, int64_t rows, int64_t n,
             float eps, float* inv_rms, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::rmsnorm";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && n > 0, kKernel, "rows >= 0 and n > 0");
  SPINDLE_KERNEL_REQUIRE(ld_x >= n && ld_y >= n, kKernel, "ld_x >= n and ld_y >= n");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && w != nullptr && y != nullptr, kKernel,
                         "x, w and y must be non-null");
  rmsnorm_kernel<T>
      <<<row_blocks(rows), threads_for(n), 0, stream>>>(x, ld_x, w, y, ld_y, rows, n, eps, inv_rms);
  check_launch(kKernel);
}

template <class T>
void rmsnorm_backward(const T* x, int64_t ld_x, const float* w, const float* inv_rms, const T* dy,
                      int64_t ld_dy, T* dx, int64_t ld_dx, int64_t rows, int64_t n, float beta_dx,
                      cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::rmsnorm_backward";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && n > 0, kKernel, "rows >= 0 and n > 0");
  SPINDLE_KERNEL_REQUIRE(ld_x >= n && ld_dy >= n && ld_dx >= n, kKernel,
                         "ld_x, ld_dy and ld_dx must be >= n");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(
      x != nullptr && w != nullptr && inv_rms != nullptr && dy != nullptr && dx != nullptr, kKernel,
      "x, w, inv_rms, dy and dx must be non-null");
  SPINDLE_KERNEL_REQUIRE(static_cast<const void*>(dx) != static_cast<const void*>(x) &&
                             static_cast<const void*>(dx) != static_cast<const void*>(dy),
                         kKernel, "dx may not alias x or dy");
  rmsnorm_backward_kernel<T><<<row_blocks(rows), threads_for(n), 0, stream>>>(
      x, ld_x, w, inv_rms, dy, ld_dy, dx, ld_dx, rows, n, beta_dx);
  check_launch(kKernel);
}

template void rmsnorm<float>(const float*, int64_t, const float*, float*, int64_t, int64_t, int64_t,
                             float, float*, cudaStream_t);
template void rmsnorm<bf16>(const bf16*, int64_t, const float*, bf16*, int64_t, int64_t, int64_t,
                            float, float*, cudaStream_t);
template void rmsnorm_backward<float>(const float*, int64_t, const float*, const float*,
                                      const float*, int64_t, float*, int64_t, int64_t, int64_t,
                                      float, cudaStream_t);
template void rmsnorm_backward<bf16>(const bf16*, int64_t, const float*, const float*, const bf16*,
                                     int64_t, bf16*, int64_t, int64_t, int64_t, float,
                                     cudaStream_t);

}  // namespace spindle::kernels::cuda
