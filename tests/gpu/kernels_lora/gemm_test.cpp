// cuBLAS linear / gemm against the CPU kernels (kernels/matmul.h) on the same (rounded) inputs:
// padded strides, rows 0 and 1, all four transpose combinations, beta 0 over NaN (overwrite)
// and beta != 0 (accumulate), and a long K that TF32 would miss at fp32 tolerance.

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "gpu_test_util.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/matmul.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class CudaGemm : public ::testing::Test {};
using Dtypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaGemm, Dtypes);

template <class T>
void check_linear(Blas& blas, int64_t rows, int64_t k, int64_t n, float beta, uint32_t seed,
                  int64_t ldx_pad = 5) {
  const int64_t ldx = k + ldx_pad;
  const int64_t ldy = n + 3;
  const auto x = quantize<T>(random_floats(size_t(std::max<int64_t>(rows, 1) * ldx), seed));
  const auto W = quantize<T>(random_floats(size_t(n * k), seed + 1));
  std::vector<float> y0 =
      quantize<T>(random_floats(size_t(std::max<int64_t>(rows, 1) * ldy), seed + 2));
  // beta == 0 overwrites: NaN in y must not leak into the result (padding stays NaN).
  if (beta == 0.0f) {
    for (float& v : y0) v = std::nanf("");
  }
  std::vector<float> want = y0;
  if (beta == 0.0f) {
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < n; ++j) want[size_t(t * ldy + j)] = 0.0f;
  }
  kernels::linear(x.data(), ldx, rows, k, W.data(), n, want.data(), ldy, beta);

  auto dx = upload_as<T>(x);
  auto dW = upload_as<T>(W);
  auto dy = upload_as<T>(y0);
  fence_uploads();
  Stream stream;
  linear<T>(blas, dx.data(), ldx, rows, k, dW.data(), n, dy.data(), ldy, beta, stream.get());
  stream.synchronize();
  EXPECT_TRUE(all_close(std::string("linear ") + dtype_name<T>() + " rows " + std::to_string(rows) +
                            " beta " + std::to_string(beta),
                        download_floats(dy), want, dtype_rtol<T>()));
}

TYPED_TEST(CudaGemm, LinearMatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  Blas blas;
  for (int64_t rows : {0, 1, 37}) {
    check_linear<TypeParam>(blas, rows, 67, 45, 0.0f, 11);
    check_linear<TypeParam>(blas, rows, 67, 45, 0.5f, 12);
  }
  // A long reduction: TF32 (10-bit mantissa) would miss the fp32 tolerance by far.
  check_linear<TypeParam>(blas, 9, 1031, 130, 1.0f, 13);
}

// Decode shapes: 1..8 rows with k and ldx multiples of 8 take bf16's skinny (gemv) path; n not a
// multiple of the 8 columns a block computes; 9 rows fall back to cuBLAS.
TYPED_TEST(CudaGemm, LinearDecodeRowsMatchCpu) {
  SPINDLE_REQUIRE_GPU();
  Blas blas;
  for (int64_t rows = 1; rows <= 9; ++rows) {
    check_linear<TypeParam>(blas, rows, 1024, 1003, 0.0f, 21 + uint32_t(rows), /*ldx_pad=*/8);
    check_linear<TypeParam>(blas, rows, 264, 77, 0.5f, 41 + uint32_t(rows), /*ldx_pad=*/0);
  }
  check_linear<TypeParam>(blas, 1, 3072, 4099, 1.0f, 61, /*ldx_pad=*/16);
}

template <class T>
void check_gemm(Blas& blas, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                float beta, uint32_t seed) {
  const int64_t a_rows = ta == Trans::yes ? K : M;
  const int64_t a_cols = ta == Trans::yes ? M : K;
  const int64_t b_rows = tb == Trans::yes ? N : K;
  const int64_t b_cols = tb == Trans::yes ? K : N;
  const int64_t lda = a_cols + 3;
  const int64_t ldb = b_cols + 2;
  const int64_t ldc = N + 4;
  const auto A = quantize<T>(random_floats(size_t(a_rows * lda), seed));
  const auto B = quantize<T>(random_floats(size_t(b_rows * ldb), seed + 1));
  std::vector<float> C0 = quantize<T>(random_floats(size_t(M * ldc), seed + 2));
  if (beta == 0.0f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C0[size_t(i * ldc + j)] = std::nanf("");
  }
  std::vector<double> want(C0.begin(), C0.end());
  // Double reference (the CPU sgemm propagates NaN from C even at beta 0 in some builds).
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < K; ++p) {
        const double a = ta == Trans::yes ? A[size_t(p * lda + i)] : A[size_t(i * lda + p)];
        const double b = tb == Trans::yes ? B[size_t(j * ldb + p)] : B[size_t(p * ldb + j)];
        s += a * b;
      }
      const double c = beta == 0.0f ? 0.0 : double(beta) * C0[size_t(i * ldc + j)];
      want[size_t(i * ldc + j)] = double(alpha) * s + c;
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    // The CPU kernel agrees with the double loop (same contract, same layout).
    if (beta != 0.0f) {
      std::vector<float> cpu = C0;
      kernels::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, cpu.data(), ldc);
      EXPECT_TRUE(all_close("cpu gemm vs double", cpu, want, 1e-5));
    }
  }
  auto dA = upload_as<T>(A);
  auto dB = upload_as<T>(B);
  auto dC = upload_as<T>(C0);
  fence_uploads();
  Stream stream;
  gemm<T>(blas, ta, tb, M, N, K, alpha, dA.data(), lda, dB.data(), ldb, beta, dC.data(), ldc,
          stream.get());
  stream.synchronize();
  EXPECT_TRUE(all_close(std::string("gemm ") + dtype_name<T>() + " ta " + std::to_string(int(ta)) +
                            " tb " + std::to_string(int(tb)) + " beta " + std::to_string(beta),
                        download_floats(dC), want, dtype_rtol<T>()));
}

TYPED_TEST(CudaGemm, GemmAllTransposeCombos) {
  SPINDLE_REQUIRE_GPU();
  Blas blas;
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      check_gemm<TypeParam>(blas, ta, tb, 33, 29, 71, 0.75f, 0.5f, 21);
      check_gemm<TypeParam>(blas, ta, tb, 1, 40, 300, 1.0f, 0.0f, 22);
      check_gemm<TypeParam>(blas, ta, tb, 0, 5, 7, 1.0f, 1.0f, 23);
    }
  }
}

TYPED_TEST(CudaGemm, ContractViolationsThrowBeforeLaunch) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  Blas blas;
  DeviceBuffer<T> buf(64);
  T* p = buf.data();
  EXPECT_THROW(linear<T>(blas, p, 3, 2, 4, p, 2, p, 2, 0.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(linear<T>(blas, p, 4, 2, 4, p, 2, p, 1, 0.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(linear<T>(blas, p, 4, 2, 0, p, 2, p, 2, 0.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(linear<T>(blas, p, 4, -1, 4, p, 2, p, 2, 0.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(linear<T>(blas, nullptr, 4, 2, 4, p, 2, p, 2, 0.0f, nullptr), std::invalid_argument);
  // rows == 0 is a no-op even with null pointers.
  EXPECT_NO_THROW(linear<T>(blas, nullptr, 4, 0, 4, nullptr, 2, nullptr, 2, 0.0f, nullptr));
  // op(A) = [M, K] = [3, 4] row-major needs lda >= 4; transposed storage [4, 3] needs lda >= 3.
  EXPECT_THROW(gemm<T>(blas, Trans::no, Trans::no, 3, 2, 4, 1.0f, p, 3, p, 2, 0.0f, p, 2, nullptr),
               std::invalid_argument);
  EXPECT_THROW(gemm<T>(blas, Trans::no, Trans::yes, 3, 2, 4, 1.0f, p, 4, p, 2, 0.0f, p, 2, nullptr),
               std::invalid_argument);
  EXPECT_THROW(gemm<T>(blas, Trans::no, Trans::no, 3, 2, 4, 1.0f, p, 4, p, 2, 0.0f, p, 1, nullptr),
               std::invalid_argument);
  EXPECT_THROW(gemm<T>(blas, Trans::no, Trans::no, -1, 2, 4, 1.0f, p, 4, p, 2, 0.0f, p, 2, nullptr),
               std::invalid_argument);
  EXPECT_NO_THROW(
      gemm<T>(blas, Trans::yes, Trans::no, 3, 2, 4, 1.0f, p, 3, p, 2, 0.0f, p, 2, nullptr));
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
