#pragma once
// Dense GEMMs through cuBLAS (cublasGemmEx / cublasLt), row-major like kernels/matmul.h.
// bf16 operands accumulate in fp32 (CUBLAS_COMPUTE_32F); the fp32 mode uses CUBLAS_COMPUTE_32F
// with TF32 off, so fp32 results match the CPU's sgemm to rounding.

#include <cstdint>
#include <span>

#include "spindle/kernels/cuda/runtime.h"
#include "spindle/kernels/matmul.h"

namespace spindle::kernels::cuda {

// One cuBLAS handle (+ its workspace) per thread that launches work; bound to a stream per call.
class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  void* handle() const { return handle_; }  // cublasHandle_t

 private:
  void* handle_ = nullptr;
  void* lt_handle_ = nullptr;  // cublasLtHandle_t (optional fast path)
  DeviceBuffer<unsigned char> workspace_;
  friend struct BlasAccess;
};

// y[rows, n] = x[rows, k] · W[n, k]ᵀ + beta · y.  Row strides ldx >= k, ldy >= n, W dense.
// rows may be 0 (no-op). T = float or bf16; x, W, y all T.
template <class T>
void linear(Blas& blas, const T* x, int64_t ldx, int64_t rows, int64_t k, const T* W, int64_t n,
            T* y, int64_t ldy, float beta, cudaStream_t stream);

// One output of linear_multi: y[rows, n] (row stride ldy >= n) = x · W[n, k]ᵀ + beta · y.
template <class T>
struct LinearOut {
  const T* W = nullptr;
  int64_t n = 0;
  T* y = nullptr;
  int64_t ldy = 0;
};

// linear() for 1..3 outputs sharing x (q/k/v, gate/up), with each output's result bitwise that
// of its own linear() call. bf16 decode batches (linear's skinny path applies to x and every W)
// run as one launch; otherwise one linear() per output, in order. The outputs must not overlap
// x or each other.
template <class T>
void linear_multi(Blas& blas, const T* x, int64_t ldx, int64_t rows, int64_t k,
                  std::span<const LinearOut<T>> outs, float beta, cudaStream_t stream);

// C[M, N] = alpha · op(A)[M, K] · op(B)[K, N] + beta · C, row-major (for backward passes).
template <class T>
void gemm(Blas& blas, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, float beta, T* C, int64_t ldc,
          cudaStream_t stream);

}  // namespace spindle::kernels::cuda
