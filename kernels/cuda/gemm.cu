// Dense GEMMs through cublasGemmEx, row-major in, column-major cuBLAS underneath: a row-major
// [r, c] matrix with stride ld is the column-major [c, r] matrix with the same ld, so the
// row-major C = op(A)·op(B) is computed as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands
// swapped and their transpose flags kept.

#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "gemv.cuh"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {

// Hopper wants at least 32 MiB for its best kernels (cuBLAS docs, cublasSetWorkspace).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct BlasAccess {
  static cublasHandle_t handle(const Blas& b) { return static_cast<cublasHandle_t>(b.handle_); }
  static DeviceBuffer<unsigned char>& workspace(Blas& b) { return b.workspace_; }
};

namespace {

// As check(): the caller's file:line; cuBLAS's allocation failure is an out-of-memory error
// (CudaError::out_of_memory, so it reaches a client as resource_exhausted).
void check_blas(cublasStatus_t status, const char* what, const char* file = __builtin_FILE(),
                int line = __builtin_LINE()) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw CudaError(
        std::string(what) + " at " + file + ":" + std::to_string(line) + ": " +
            cublasGetStatusString(status),
        status == CUBLAS_STATUS_ALLOC_FAILED ? cudaErrorMemoryAllocation : cudaErrorUnknown);
  }
}

template <class T>
constexpr cudaDataType_t data_type();
template <>
constexpr cudaDataType_t data_type<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t data_type<bf16>() {
  return CUDA_R_16BF;
}

// Binds the handle to `stream`. cublasSetStream resets the workspace to cuBLAS's default pool,
// so ours is set again after it.
cublasHandle_t bind(Blas& blas, cudaStream_t stream) {
  cublasHandle_t h = BlasAccess::handle(blas);
  check_blas(cublasSetStream(h, stream), "cublasSetStream");
  DeviceBuffer<unsigned char>& ws = BlasAccess::workspace(blas);
  check_blas(cublasSetWorkspace(h, ws.data(), ws.bytes()), "cublasSetWorkspace");
  return h;
}

bool fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

cublasOperation_t op(Trans t) {
  return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
}

}  // namespace

Blas::Blas() : workspace_(kWorkspaceBytes) {
  cublasHandle_t h = nullptr;
  check_blas(cublasCreate(&h), "cublasCreate");
  handle_ = h;
  // Default math: fp32 GEMMs stay true fp32 (no TF32), bf16 GEMMs use tensor cores anyway.
  check_blas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  check_blas(cublasSetWorkspace(h, workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

template <class T>
void linear(Blas& blas, const T* x, int64_t ldx, int64_t rows, int64_t k, const T* W, int64_t n,
            T* y, int64_t ldy, float beta, cudaStream_t stream) {
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && k > 0 && n > 0, "cuda::linear", "rows >= 0, k > 0, n > 0");
  SPINDLE_KERNEL_REQUIRE(ldx >= k && ldy >= n, "cuda::linear", "ldx >= k and ldy >= n");
  SPINDLE_KERNEL_REQUIRE(fits_int(rows) && fits_int(ldx) && fits_int(ldy), "cuda::linear",
                         "sizes and strides must fit in int32");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(x != nullptr && W != nullptr && y != nullptr, "cuda::linear",
                         "x, W and y must be non-null");
  if constexpr (std::is_same_v<T, bf16>) {
    // Decode batches: a warp per output column streams W at close to full bandwidth.
    if (detail::gemv_applies(x, ldx, rows, k, W)) {
      detail::linear_gemv(x, ldx, rows, k, W, n, y, ldy, beta, stream);
      return;
    }
  }
  const float alpha = 1.0f;
  // Column-major: yᵀ[n, rows] = W(col-major [k, n])ᵀ · xᵀ(col-major [k, rows]).
  check_blas(cublasGemmEx(bind(blas, stream), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(rows), int(k),
                          &alpha, W, data_type<T>(), int(k), x, data_type<T>(), int(ldx), &beta, y,
                          data_type<T>(), int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx (linear)");
}

template <class T>
void linear_multi(Blas& blas, const T* x, int64_t ldx, int64_t rows, int64_t k,
                  std::span<const LinearOut<T>> outs, float beta, cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::linear_multi";
  SPINDLE_KERNEL_REQUIRE(!outs.empty() && outs.size() <= size_t{detail::kGemvMaxOuts}, kKernel,
                         "1 to 3 outputs");
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && k > 0 && ldx >= k, kKernel, "rows >= 0, k > 0, ldx >= k");
  for (const LinearOut<T>& o : outs) {
    SPINDLE_KERNEL_REQUIRE(o.n > 0 && o.ldy >= o.n, kKernel, "every output has n > 0, ldy >= n");
  }
  if (rows == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    bool skinny = x != nullptr;
    for (const LinearOut<T>& o : outs) {
      skinny = skinny && o.W != nullptr && o.y != nullptr && fits_int(o.ldy) && fits_int(ldx) &&
               detail::gemv_applies(x, ldx, rows, k, o.W);
    }
    if (skinny) {
      detail::GemvOut g[detail::kGemvMaxOuts];
      for (size_t i = 0; i < outs.size(); ++i)
        g[i] = {outs[i].W, outs[i].n, outs[i].y, outs[i].ldy};
      detail::linear_gemv_multi(x, ldx, rows, k, g, int(outs.size()), beta, stream);
      return;
    }
  }
  // linear() checks the rest (null pointers, int32 sizes) per output.
  for (const LinearOut<T>& o : outs)
    linear<T>(blas, x, ldx, rows, k, o.W, o.n, o.y, o.ldy, beta, stream);
}

template <class T>
void gemm(Blas& blas, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, float beta, T* C, int64_t ldc,
          cudaStream_t stream) {
  SPINDLE_KERNEL_REQUIRE(M >= 0 && N >= 0 && K >= 0, "cuda::gemm", "non-negative sizes");
  // Row-major strides: op(A) is [M, K], stored [M, K] or (transposed) [K, M].
  const int64_t a_cols = trans_a == Trans::yes ? M : K;
  const int64_t b_cols = trans_b == Trans::yes ? K : N;
  SPINDLE_KERNEL_REQUIRE(lda >= std::max<int64_t>(1, a_cols) &&
                             ldb >= std::max<int64_t>(1, b_cols) && ldc >= std::max<int64_t>(1, N),
                         "cuda::gemm", "lda, ldb, ldc must cover a row of A, B, C");
  SPINDLE_KERNEL_REQUIRE(
      fits_int(M) && fits_int(N) && fits_int(K) && fits_int(lda) && fits_int(ldb) && fits_int(ldc),
      "cuda::gemm", "sizes and strides must fit in int32");
  if (M == 0 || N == 0) return;
  SPINDLE_KERNEL_REQUIRE(C != nullptr && (K == 0 || (A != nullptr && B != nullptr)), "cuda::gemm",
                         "A, B and C must be non-null");
  // Column-major: Cᵀ[N, M] = op(B)ᵀ · op(A)ᵀ, each row-major operand read as its transpose.
  check_blas(cublasGemmEx(bind(blas, stream), op(trans_b), op(trans_a), int(N), int(M), int(K),
                          &alpha, B, data_type<T>(), int(ldb), A, data_type<T>(), int(lda), &beta,
                          C, data_type<T>(), int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx (gemm)");
}

template void linear<float>(Blas&, const float*, int64_t, int64_t, int64_t, const float*, int64_t,
                            float*, int64_t, float, cudaStream_t);
template void linear<bf16>(Blas&, const bf16*, int64_t, int64_t, int64_t, const bf16*, int64_t,
                           bf16*, int64_t, float, cudaStream_t);
template void linear_multi<float>(Blas&, const float*, int64_t, int64_t, int64_t,
                                  std::span<const LinearOut<float>>, float, cudaStream_t);
template void linear_multi<bf16>(Blas&, const bf16*, int64_t, int64_t, int64_t,
                                 std::span<const LinearOut<bf16>>, float, cudaStream_t);
template void gemm<float>(Blas&, Trans, Trans, int64_t, int64_t, int64_t, float, const float*,
                          int64_t, const float*, int64_t, float, float*, int64_t, cudaStream_t);
template void gemm<bf16>(Blas&, Trans, Trans, int64_t, int64_t, int64_t, float, const bf16*,
                         int64_t, const bf16*, int64_t, float, bf16*, int64_t, cudaStream_t);

}  // namespace spindle::kernels::cuda
