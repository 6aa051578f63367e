// SwiGLU and embedding gather/scatter on the GPU (activation.h). Elementwise grid-stride
// kernels with fp32 math in the CPU kernels' order: silu(g) = g·(1/(1 + e^-g)).

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/activation.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

// out may alias gate or up: element i is read before it is written, by the same thread.
template <class T>
__global__ void swiglu_kernel(const T* gate, const T* up, T* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(gate[i]);
    const float u = to_f32(up[i]);
    out[i] = from_f32<T>(__fmul_rn(g, 1.0f / (1.0f + expf(-g))) * u);
  }
}

// σ = 1/(1 + e^-g); large |g| stays finite (e^-g = inf gives σ = 0).
template <class T>
__global__ void swiglu_backward_kernel(const T* gate, const T* up, const T* d_out, T* d_gate,
                                       T* d_up, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(gate[i]);
    const float u = to_f32(up[i]);
    const float d = to_f32(d_out[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    d_up[i] = from_f32<T>(d * __fmul_rn(g, sig));
    d_gate[i] = from_f32<T>(__fmul_rn(d, u) * (sig * (1.0f + g * (1.0f - sig))));
  }
}

// One thread per output element (row-major over [rows, dim]).
template <class T>
__global__ void embedding_gather_kernel(const T* table, int64_t dim, const int32_t* tokens,
                                        int64_t rows, T* out, int64_t ld_out) {
  const int64_t total = rows * dim;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / dim;
    const int64_t c = idx - r * dim;
    out[r * ld_out + c] = table[int64_t{tokens[r]} * dim + c];
  }
}

template <class T>
__global__ void embedding_scatter_add_kernel(const T* d_out, int64_t ld_d_out,
                                             const int32_t* tokens, int64_t rows, int64_t dim,
                                             float* d_table) {
  const int64_t total = rows * dim;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / dim;
    const int64_t c = idx - r * dim;
    atomicAdd(d_table + int64_t{tokens[r]} * dim + c, to_f32(d_out[r * ld_d_out + c]));
  }
}

template <class T>
__global__ void moe_combine_kernel(const T* src, int64_t ld_src, const int32_t* pos,
                                   const float* w, int64_t rows, int64_t K, int64_t dim,
                                   float beta, T* x, int64_t ld_x) {
  const int64_t total = rows * dim;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / dim;
    const int64_t c = idx - t * dim;
    float acc = beta == 0.0f ? 0.0f : beta * to_f32(x[t * ld_x + c]);
    for (int64_t k = 0; k < K; ++k) {
      const float v = to_f32(src[int64_t{pos[t * K + k]} * ld_src + c]);
      acc += w != nullptr ? w[t * K + k] * v : v;
    }
    x[t * ld_x + c] = from_f32<T>(acc);
  }
}

constexpr int kCombineBackwardThreads = 256;

// One block per row i: the scaled copy, then a fixed shared-memory tree for the dot product.
template <class T>
__global__ void moe_combine_backward_kernel(const T* dy, int64_t ld_dy, const int32_t* rows,
                                            const float* w, const T* out, int64_t ld_out,
                                            int64_t dim, T* d_out, int64_t ld_d_out, float* d_w) {
  __shared__ float partial[kCombineBackwardThreads];
  const int64_t i = blockIdx.x;
  const T* g = dy + int64_t{rows[i]} * ld_dy;
  const T* o = out + i * ld_out;
  T* d = d_out + i * ld_d_out;
  const float wi = w[i];
  float acc = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float gc = to_f32(g[c]);
    d[c] = from_f32<T>(wi * gc);
    acc += gc * to_f32(o[c]);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kCombineBackwardThreads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) d_w[i] = partial[0];
}

}  // namespace

template <class T>
void swiglu(const T* gate, const T* up, T* out, int64_t count, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::swiglu";
  SPINDLE_KERNEL_REQUIRE(count >= 0, kKernel, "count >= 0");
  if (count == 0) return;
  SPINDLE_KERNEL_REQUIRE(gate != nullptr && up != nullptr && out != nullptr, kKernel,
                         "gate, up and out must be non-null");
  swiglu_kernel<T>
      <<<detail::grid_for(count, kThreads), kThreads, 0, stream>>>(gate, up, out, count);
  check_launch(kKernel);
}

template <class T>
void swiglu_backward(const T* gate, const T* up, const T* d_out, T* d_gate, T* d_up, int64_t count,
                     cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::swiglu_backward";
  SPINDLE_KERNEL_REQUIRE(count >= 0, kKernel, "count >= 0");
  if (count == 0) return;
  SPINDLE_KERNEL_REQUIRE(
      gate != nullptr && up != nullptr && d_out != nullptr && d_gate != nullptr && d_up != nullptr,
      kKernel, "gate, up, d_out, d_gate and d_up must be non-null");
  const T* ins[] = {gate, up, d_out};
  for (const T* in : ins) {
    SPINDLE_KERNEL_REQUIRE(in != d_gate && in != d_up, kKernel,
                           "d_gate and d_up must not alias gate, up or d_out");
  }
  SPINDLE_KERNEL_REQUIRE(d_gate != d_up, kKernel, "d_gate and d_up must differ");
  swiglu_backward_kernel<T><<<detail::grid_for(count, kThreads), kThreads, 0, stream>>>(
      gate, up, d_out, d_gate, d_up, count);
  check_launch(kKernel);
}

template <class T>
void embedding_gather(const T* table, int64_t dim, const int32_t* tokens, int64_t rows, T* out,
                      int64_t ld_out, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::embedding_gather";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && dim > 0, kKernel, "rows >= 0 and dim > 0");
  SPINDLE_KERNEL_REQUIRE(ld_out >= dim, kKernel, "ld_out >= dim");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(table != nullptr && tokens != nullptr && out != nullptr, kKernel,
                         "table, tokens and out must be non-null");
  embedding_gather_kernel<T><<<detail::grid_for(rows * dim, kThreads), kThreads, 0, stream>>>(
      table, dim, tokens, rows, out, ld_out);
  check_launch(kKernel);
}

template <class T>
void embedding_scatter_add(const T* d_out, int64_t ld_d_out, const int32_t* tokens, int64_t rows,
                           int64_t dim, float* d_table, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::embedding_scatter_add";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && dim > 0, kKernel, "rows >= 0 and dim > 0");
  SPINDLE_KERNEL_REQUIRE(ld_d_out >= dim, kKernel, "ld_d_out >= dim");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(d_out != nullptr && tokens != nullptr && d_table != nullptr, kKernel,
                         "d_out, tokens and d_table must be non-null");
  embedding_scatter_add_kernel<T><<<detail::grid_for(rows * dim, kThreads), kThreads, 0, stream>>>(
      d_out, ld_d_out, tokens, rows, dim, d_table);
  check_launch(kKernel);
}

template <class T>
void moe_combine(const T* src, int64_t ld_src, const int32_t* pos, const float* w, int64_t rows,
                 int64_t K, int64_t dim, float beta, T* x, int64_t ld_x, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::moe_combine";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && K >= 1 && dim > 0, kKernel, "rows >= 0, K >= 1, dim > 0");
  SPINDLE_KERNEL_REQUIRE(ld_src >= dim && ld_x >= dim, kKernel, "ld_src >= dim and ld_x >= dim");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(src != nullptr && pos != nullptr && x != nullptr, kKernel,
                         "src, pos and x must be non-null");
  moe_combine_kernel<T><<<detail::grid_for(rows * dim, kThreads), kThreads, 0, stream>>>(
      src, ld_src, pos, w, rows, K, dim, beta, x, ld_x);
  check_launch(kKernel);
}

template <class T>
void moe_combine_backward(const T* dy, int64_t ld_dy, const int32_t* rows, const float* w,
                          const T* out, int64_t ld_out, int64_t n, int64_t dim, T* d_out,
                          int64_t ld_d_out, float* d_w, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::moe_combine_backward";
  SPINDLE_KERNEL_REQUIRE(n >= 0 && dim > 0, kKernel, "n >= 0 and dim > 0");
  SPINDLE_KERNEL_REQUIRE(ld_dy >= dim && ld_out >= dim && ld_d_out >= dim, kKernel,
                         "ld_dy, ld_out and ld_d_out >= dim");
  SPINDLE_KERNEL_REQUIRE(n <= int64_t{2147483647}, kKernel, "n fits a grid");
  if (n == 0) return;
  SPINDLE_KERNEL_REQUIRE(dy != nullptr && rows != nullptr && w != nullptr && out != nullptr &&
                             d_out != nullptr && d_w != nullptr,
                         kKernel, "every pointer must be non-null");
  SPINDLE_KERNEL_REQUIRE(static_cast<const void*>(d_out) != static_cast<const void*>(dy) &&
                             static_cast<const void*>(d_out) != static_cast<const void*>(out),
                         kKernel, "d_out must not alias dy or out");
  moe_combine_backward_kernel<T><<<unsigned(n), kCombineBackwardThreads, 0, stream>>>(
      dy, ld_dy, rows, w, out, ld_out, dim, d_out, ld_d_out, d_w);
  check_launch(kKernel);
}

#define SPINDLE_INSTANTIATE_ACTIVATION(T)                                                        \
  template void swiglu<T>(const T*, const T*, T*, int64_t, cudaStream_t);                        \
  template void swiglu_backward<T>(const T*, const T*, const T*, T*, T*, int64_t, cudaStream_t); \
  template void embedding_gather<T>(const T*, int64_t, const int32_t*, int64_t, T*, int64_t,     \
                                    cudaStream_t);                                               \
  template void embedding_scatter_add<T>(const T*, int64_t, const int32_t*, int64_t, int64_t,    \
                                         float*, cudaStream_t);                            \
  template void moe_combine<T>(const T*, int64_t, const int32_t*, const float*, int64_t, int64_t, \
                               int64_t, float, T*, int64_t, cudaStream_t);                      \
  template void moe_combine_backward<T>(const T*, int64_t, const int32_t*, const float*,         \
                                        const T*, int64_t, int64_t, int64_t, T*, int64_t, float*, \
                                        cudaStream_t);
SPINDLE_INSTANTIATE_ACTIVATION(float)
SPINDLE_INSTANTIATE_ACTIVATION(bf16)
#undef SPINDLE_INSTANTIATE_ACTIVATION

}  // namespace spindle::kernels::cuda
