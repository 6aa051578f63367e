// cuda::linear_multi: bf16 decode batches (1..8 rows, the single-launch skinny path) are bitwise
// the separate cuda::linear calls; fp32 and shapes that fall back to one linear per output (9+
// rows, k not a multiple of 8) match the CPU kernel within the dtype tolerance; contract
// violations throw std::invalid_argument.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../kernels_lora/gpu_test_util.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/matmul.h"

namespace spindle::kernels::cuda::test {
namespace {

struct Shape {
  int64_t n, ldy;
};

// Runs linear_multi over `shapes` (outputs sharing x) and checks each output against separate
// linear() calls (bitwise when `bitwise`) and against the CPU kernel (dtype tolerance).
template <class T>
void check_multi(Blas& blas, int64_t rows, int64_t k, int64_t ldx, const std::vector<Shape>& shapes,
                 float beta, uint32_t seed, bool bitwise) {
  const std::string tag = std::string(dtype_name<T>()) + " rows " + std::to_string(rows) + " k " +
                          std::to_string(k) + " outputs " + std::to_string(shapes.size()) +
                          " beta " + std::to_string(beta);
  const auto x = quantize<T>(random_floats(size_t(std::max<int64_t>(rows, 1) * ldx), seed));
  auto dx = upload_as<T>(x);
  std::vector<std::vector<float>> W, y0;
  std::vector<DeviceBuffer<T>> dW, dy_multi, dy_single;
  for (size_t o = 0; o < shapes.size(); ++o) {
    const auto [n, ldy] = shapes[o];
    W.push_back(quantize<T>(random_floats(size_t(n * k), seed + 10 + uint32_t(o))));
    y0.push_back(quantize<T>(
        random_floats(size_t(std::max<int64_t>(rows, 1) * ldy), seed + 20 + uint32_t(o))));
    dW.push_back(upload_as<T>(W.back()));
    dy_multi.push_back(upload_as<T>(y0.back()));
    dy_single.push_back(upload_as<T>(y0.back()));
  }
  fence_uploads();
  Stream stream;
  std::vector<LinearOut<T>> outs;
  for (size_t o = 0; o < shapes.size(); ++o) {
    outs.push_back({dW[o].data(), shapes[o].n, dy_multi[o].data(), shapes[o].ldy});
    linear<T>(blas, dx.data(), ldx, rows, k, dW[o].data(), shapes[o].n, dy_single[o].data(),
              shapes[o].ldy, beta, stream.get());
  }
  linear_multi<T>(blas, dx.data(), ldx, rows, k, std::span<const LinearOut<T>>(outs), beta,
                  stream.get());
  stream.synchronize();
  for (size_t o = 0; o < shapes.size(); ++o) {
    const std::string what = tag + " output " + std::to_string(o);
    const auto got = dy_multi[o].download();
    if (bitwise) EXPECT_TRUE(bitwise_equal(what + " vs linear", got, dy_single[o].download()));
    std::vector<float> want = y0[o];
    kernels::linear(x.data(), ldx, rows, k, W[o].data(), shapes[o].n, want.data(), shapes[o].ldy,
                    beta);
    EXPECT_TRUE(all_close(what + " vs cpu", to_floats<T>(got), want, dtype_rtol<T>()));
  }
}

// Qwen3-0.6B-like proportions, scaled: q wider than k/v, n not a multiple of the 8 columns of a
// block, so warps of one block straddle two outputs.
const std::vector<Shape> kQkv = {{203, 203}, {69, 72}, {69, 69}};
const std::vector<Shape> kGateUp = {{301, 301}, {301, 305}};

TEST(CudaLinearMulti, Bf16DecodeIsBitwiseSeparateLinears) {
  SPINDLE_REQUIRE_GPU();
  Blas blas;
  for (int64_t rows = 1; rows <= 8; ++rows) {
    check_multi<bf16>(blas, rows, 1024, 1024, kQkv, 0.0f, 100 + uint32_t(rows), true);
    check_multi<bf16>(blas, rows, 264, 272, kGateUp, 1.0f, 200 + uint32_t(rows), true);
    check_multi<bf16>(blas, rows, 512, 512, {{77, 80}}, 0.5f, 300 + uint32_t(rows), true);
  }
}

TEST(CudaLinearMulti, Fp32MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  Blas blas;
  for (int64_t rows : {0, 1, 5, 37}) {
    check_multi<float>(blas, rows, 264, 264, kQkv, 0.0f, 400 + uint32_t(rows), false);
    check_multi<float>(blas, rows, 67, 70, kGateUp, 1.0f, 500 + uint32_t(rows), false);
  }
}

// Shapes the skinny path does not take: 9+ rows, k or ldx not a multiple of 8.
TEST(CudaLinearMulti, Bf16FallbackMatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  Blas blas;
  check_multi<bf16>(blas, 0, 264, 264, kQkv, 0.0f, 600, false);
  check_multi<bf16>(blas, 9, 264, 264, kQkv, 0.0f, 601, false);
  check_multi<bf16>(blas, 37, 264, 264, kGateUp, 1.0f, 602, false);
  check_multi<bf16>(blas, 3, 67, 67, kQkv, 0.0f, 603, false);
  check_multi<bf16>(blas, 3, 264, 267, kGateUp, 0.5f, 604, false);
}

TEST(CudaLinearMulti, ContractViolationsThrow) {
  SPINDLE_REQUIRE_GPU();
  Blas blas;
  DeviceBuffer<bf16> x(64), W(64), y(64);
  const LinearOut<bf16> ok{W.data(), 8, y.data(), 8};
  auto call = [&](std::vector<LinearOut<bf16>> outs, int64_t rows, int64_t k, int64_t ldx) {
    linear_multi<bf16>(blas, x.data(), ldx, rows, k, std::span<const LinearOut<bf16>>(outs), 0.0f,
                       nullptr);
  };
  EXPECT_THROW(call({}, 1, 8, 8), std::invalid_argument);
  EXPECT_THROW(call({ok, ok, ok, ok}, 1, 8, 8), std::invalid_argument);
  EXPECT_THROW(call({ok, {W.data(), 0, y.data(), 8}}, 1, 8, 8), std::invalid_argument);
  EXPECT_THROW(call({ok, {W.data(), 8, y.data(), 7}}, 1, 8, 8), std::invalid_argument);
  EXPECT_THROW(call({ok}, -1, 8, 8), std::invalid_argument);
  EXPECT_THROW(call({ok}, 1, 8, 7), std::invalid_argument);
  EXPECT_THROW(call({ok}, 1, 0, 8), std::invalid_argument);
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
