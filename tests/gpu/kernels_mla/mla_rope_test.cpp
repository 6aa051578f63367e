// cuda::mla_rope against a double reference, cuda::rope and its own inverse; its host-side
// contract (mla_test_util.h says how the suites check).

#include "mla_test_util.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class CudaMlaRope : public ::testing::Test {};
TYPED_TEST_SUITE(CudaMlaRope, ElementTypes, TypeNames);

// x: [rows, ld] floats (already quantised); heads of width w with the rope block in the last dr
// columns. Returns want and the touched mask, in double: angle = float(pos)·inv_freq in fp32 (the
// contract's angle), cos/sin and the rotation in double, times factor.
void rope_reference(const std::vector<float>& x, int64_t ld, int64_t rows, int64_t heads, int64_t w,
                    int64_t dr, const std::vector<int32_t>& pos, const std::vector<float>& inv_freq,
                    RopeStyle style, bool inverse, double factor, std::vector<double>& want,
                    std::vector<char>& touched) {
  want.assign(x.begin(), x.end());
  touched.assign(x.size(), 0);
  const int64_t half = dr / 2;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = t * ld + h * w + (w - dr);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(pos[size_t(t)]) * inv_freq[size_t(i)];
        const double c = std::cos(double(angle));
        const double s = (inverse ? -1.0 : 1.0) * std::sin(double(angle));
        const int64_t a = style == RopeStyle::half ? base + i : base + 2 * i;
        const int64_t b = style == RopeStyle::half ? base + i + half : base + 2 * i + 1;
        const double v0 = x[size_t(a)], v1 = x[size_t(b)];
        want[size_t(a)] = (v0 * c - v1 * s) * factor;
        want[size_t(b)] = (v0 * s + v1 * c) * factor;
        touched[size_t(a)] = touched[size_t(b)] = 1;
      }
    }
  }
}

// The query layout (H heads of qw, rope block last) and the key's k_pe alone (1 head of dr).
struct RopeLayout {
  const char* name;
  int64_t heads, w;
};

std::vector<RopeLayout> rope_layouts(const Dims& d) {
  return {{"q", d.H, d.qw()}, {"k_pe", 1, d.dr}};
}

TYPED_TEST(CudaMlaRope, RopeMatchesReference) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  const int64_t rows = int64_t(kPositions.size());
  Stream stream;
  const auto d_pos = upload_vec(kPositions);
  uint32_t seed = 1;
  for (const Dims& d : kShapes) {
    const auto inv_freq = inv_freq_for(d.dr);
    const auto d_freq = upload_vec(inv_freq);
    for (const RopeLayout& lay : rope_layouts(d)) {
      const int64_t ld = lay.heads * lay.w + 3;
      const auto x = quantize<T>(padded_rows(rows, ld, lay.heads * lay.w, seed++));
      for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved}) {
        for (bool inverse : {false, true}) {
          for (float factor : {1.0f, kYarnFactor}) {
            const std::string tag = std::string(dtype<T>()) + " " + d.name + " " + lay.name +
                                    (style == RopeStyle::half ? " half" : " interleaved") +
                                    (inverse ? " inverse" : "") + " factor " +
                                    std::to_string(factor);
            std::vector<double> want;
            std::vector<char> touched;
            rope_reference(x, ld, rows, lay.heads, lay.w, d.dr, kPositions, inv_freq, style,
                           inverse, factor, want, touched);
            auto d_x = upload_as<T>(x);
            mla_rope<T>(d_x.data(), ld, rows, lay.heads, lay.w, d.dr, d_pos.data(), d_freq.data(),
                        style, inverse, factor, stream.get());
            stream.synchronize();
            EXPECT_TRUE(check_result<T>(tag, d_x.download(), to_elements<T>(x), want, touched, ld,
                                        rtol<T>()));
          }
        }
      }
    }
  }
}

// The rotation is cuda::rope's: with factor 1, mla_rope equals cuda::rope run on each head's
// last dr columns, bitwise, in both dtypes; in fp32 a factor is one more rounded multiply.
TYPED_TEST(CudaMlaRope, RopeIsCudaRopeThenFactorBitwise) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  const int64_t rows = int64_t(kPositions.size());
  Stream stream;
  const auto d_pos = upload_vec(kPositions);
  uint32_t seed = 100;
  for (const Dims& d : kShapes) {
    const auto d_freq = upload_vec(inv_freq_for(d.dr));
    for (const RopeLayout& lay : rope_layouts(d)) {
      const int64_t ld = lay.heads * lay.w + 1;
      const auto x = quantize<T>(padded_rows(rows, ld, lay.heads * lay.w, seed++));
      for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved}) {
        for (bool inverse : {false, true}) {
          const std::string tag = std::string(dtype<T>()) + " " + d.name + " " + lay.name +
                                  (style == RopeStyle::half ? " half" : " interleaved") +
                                  (inverse ? " inverse" : "");
          auto d_mla = upload_as<T>(x);
          auto d_mla_f = upload_as<T>(x);
          auto d_ref = upload_as<T>(x);
          mla_rope<T>(d_mla.data(), ld, rows, lay.heads, lay.w, d.dr, d_pos.data(), d_freq.data(),
                      style, inverse, 1.0f, stream.get());
          mla_rope<T>(d_mla_f.data(), ld, rows, lay.heads, lay.w, d.dr, d_pos.data(), d_freq.data(),
                      style, inverse, kYarnFactor, stream.get());
          for (int64_t h = 0; h < lay.heads; ++h) {
            rope<T>(d_ref.data() + h * lay.w + (lay.w - d.dr), ld, rows, 1, d.dr, d_pos.data(),
                    d_freq.data(), style, inverse, stream.get());
          }
          stream.synchronize();
          const std::vector<T> ref = d_ref.download();
          EXPECT_TRUE(bitwise_equal(tag + " factor 1", d_mla.download(), ref));
          if constexpr (std::is_same_v<T, float>) {
            std::vector<float> scaled = ref;
            for (int64_t t = 0; t < rows; ++t) {
              for (int64_t h = 0; h < lay.heads; ++h) {
                for (int64_t i = lay.w - d.dr; i < lay.w; ++i) {
                  float& v = scaled[size_t(t * ld + h * lay.w + i)];
                  v = v * kYarnFactor;
                }
              }
            }
            EXPECT_TRUE(bitwise_equal(tag + " yarn factor", d_mla_f.download(), scaled));
          }
        }
      }
    }
  }
}

// inverse(forward(x)) = x·factor² on the rope columns; everything else untouched.
TYPED_TEST(CudaMlaRope, RopeInverseUndoesForward) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  // Two roundings to T (see the header comment): bf16 gets twice its single-rounding bound.
  const double tol = std::is_same_v<T, float> ? 2e-5 : 2e-2;
  const int64_t rows = int64_t(kPositions.size());
  Stream stream;
  const auto d_pos = upload_vec(kPositions);
  uint32_t seed = 200;
  for (const Dims& d : kShapes) {
    const auto d_freq = upload_vec(inv_freq_for(d.dr));
    const int64_t w = d.qw(), ld = d.H * w + 2;
    const auto x = quantize<T>(padded_rows(rows, ld, d.H * w, seed++));
    for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved}) {
      for (float factor : {1.0f, kYarnFactor}) {
        std::vector<double> want(x.begin(), x.end());
        std::vector<char> touched(x.size(), 0);
        for (int64_t t = 0; t < rows; ++t) {
          for (int64_t h = 0; h < d.H; ++h) {
            for (int64_t i = w - d.dr; i < w; ++i) {
              const size_t k = size_t(t * ld + h * w + i);
              want[k] = double(x[k]) * factor * factor;
              touched[k] = 1;
            }
          }
        }
        auto d_x = upload_as<T>(x);
        mla_rope<T>(d_x.data(), ld, rows, d.H, w, d.dr, d_pos.data(), d_freq.data(), style, false,
                    factor, stream.get());
        mla_rope<T>(d_x.data(), ld, rows, d.H, w, d.dr, d_pos.data(), d_freq.data(), style, true,
                    factor, stream.get());
        stream.synchronize();
        const std::string tag = std::string(dtype<T>()) + " " + d.name +
                                (style == RopeStyle::half ? " half" : " interleaved") + " factor " +
                                std::to_string(factor);
        EXPECT_TRUE(
            check_result<T>(tag, d_x.download(), to_elements<T>(x), want, touched, ld, tol));
      }
    }
  }
}

TYPED_TEST(CudaMlaRope, RopeContractViolationsThrowBeforeLaunch) {
  using T = TypeParam;
  T* x = reinterpret_cast<T*>(uintptr_t{0x1000});
  const auto* pos = reinterpret_cast<const int32_t*>(uintptr_t{0x2000});
  const auto* f = reinterpret_cast<const float*>(uintptr_t{0x3000});
  const RopeStyle half = RopeStyle::half;
  const std::string k = "cuda::mla_rope";
  // Valid: ld 48, rows 2, heads 2, w 24, dr 8.
  auto call = [&](T* px, int64_t ld, int64_t rows, int64_t heads, int64_t w, int64_t dr,
                  const int32_t* pp, const float* pf, RopeStyle style) {
    mla_rope<T>(px, ld, rows, heads, w, dr, pp, pf, style, false, kYarnFactor, nullptr);
  };
  expect_contract([&] { call(x, 48, -1, 2, 24, 8, pos, f, half); }, k, "rows < 0");
  expect_contract([&] { call(x, 48, 2, 0, 24, 8, pos, f, half); }, k, "heads == 0");
  expect_contract([&] { call(x, 48, 2, 2, 0, 8, pos, f, half); }, k, "w == 0");
  expect_contract([&] { call(x, 48, 2, 2, 24, 0, pos, f, half); }, k, "dr == 0");
  expect_contract([&] { call(x, 48, 2, 2, 24, 7, pos, f, half); }, k, "odd dr");
  expect_contract([&] { call(x, 48, 2, 2, 24, 26, pos, f, half); }, k, "dr > w");
  expect_contract([&] { call(x, 47, 2, 2, 24, 8, pos, f, half); }, k, "ld < heads * w");
  expect_contract([&] { call(x, 48, 2, 2, 24, 8, pos, f, RopeStyle(7)); }, k, "bad style");
  expect_contract([&] { call(nullptr, 48, 2, 2, 24, 8, pos, f, half); }, k, "x null");
  expect_contract([&] { call(x, 48, 2, 2, 24, 8, nullptr, f, half); }, k, "pos null");
  expect_contract([&] { call(x, 48, 2, 2, 24, 8, pos, nullptr, half); }, k, "inv_freq null");
  // No rows: a no-op before the pointer checks and any CUDA call.
  EXPECT_NO_THROW(call(nullptr, 48, 0, 2, 24, 8, nullptr, nullptr, half));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
