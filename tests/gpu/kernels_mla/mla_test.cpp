// MLA's CUDA kernels (kernels/cuda/mla.cu, contract in spindle/kernels/cuda/mla.h) against
// independent double-precision references written here with naive loops, in fp32 and bf16 (bf16
// inputs are quantised first, so the reference sees exactly the values the kernel reads).
//
// Shapes: DeepSeek-like proportions scaled down (H 4, dn 16, dr 8, dv 16, R 32), odd sizes
// (H 3, dn 5, dr 6, dv 7, R 37), and a wide one whose columns exceed a block's threads (dn 144,
// dv 130, R 300). Every buffer has padded rows; columns and rows a kernel must neither read nor
// write hold NaN (q's rope columns, q_abs's rope columns, o_lat's rope columns, row padding, the
// kv_b rows of the other half, slot storage past a slot's rank), so a stray read poisons a
// checked value and a stray write shows up in the bitwise check of the untouched elements.
//
// Tolerances, |got − want| <= rtol·(|want| + rms(want over the checked elements)):
// - fp32, rtol 2e-5: fp32 arithmetic on O(1) values; dot products of at most a few hundred
//   terms (R = 300) with fp32 accumulation err by ~sqrt(n)·2^-24 relative to the rms, sincosf by
//   1–2 ulp; 2e-5 leaves a margin of more than 10 over that.
// - bf16, rtol 1e-2: the inputs are exact in the reference and the arithmetic is fp32, so the
//   error is the one rounding of the output to bf16 (at most 2^-9 ≈ 2e-3 relative); the
//   round trip inverse(forward(x)) rounds twice, each at most 2^-9 of its pair's magnitude,
//   within 2e-2 (rms term included).
// Where the contract pins the arithmetic exactly (mla_rope is cuda::rope's rotation then one
// multiply; sum_heads adds heads in order from 0.0f; copy_head_cols moves bits) the tests also
// compare bitwise.
//
// The host-side contract checks run without a device: bad arguments throw std::invalid_argument
// whose message starts with "cuda::<kernel>", before any CUDA call.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../gpu_test_util.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/mla.h"
#include "spindle/kernels/cuda/rope.h"

namespace spindle::kernels::cuda::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct TypeNames {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "f32" : "bf16";
  }
};

template <class T>
class CudaMla : public ::testing::Test {};
TYPED_TEST_SUITE(CudaMla, ElementTypes, TypeNames);

template <class T>
constexpr double rtol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-2;
}

template <class T>
const char* dtype() {
  return std::is_same_v<T, float> ? "f32" : "bf16";
}

// MLA dimensions (mla.h): qw = dn + dr, lw = R + dr, kvw = dn + dv, P = max(qw, dv).
struct Dims {
  const char* name;
  int64_t H, dn, dr, dv, R;
  int64_t qw() const { return dn + dr; }
  int64_t lw() const { return R + dr; }
  int64_t kvw() const { return dn + dv; }
  int64_t P() const { return qw() > dv ? qw() : dv; }
};

const Dims kShapes[] = {
    {"deepseek-like", 4, 16, 8, 16, 32},
    {"odd", 3, 5, 6, 7, 37},
    {"wide", 2, 144, 8, 130, 300},
};

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Elements with touched[i] within tolerance of want[i]; every other element bitwise equal to
// init[i] (NaN sentinels included). ld names the (row, column) of a failure.
template <class T>
::testing::AssertionResult check_result(const std::string& what, const std::vector<T>& got,
                                        const std::vector<T>& init, const std::vector<double>& want,
                                        const std::vector<char>& touched, int64_t ld, double tol) {
  if (got.size() != init.size() || want.size() != init.size() || touched.size() != init.size()) {
    return ::testing::AssertionFailure() << what << ": size mismatch";
  }
  double sum_sq = 0.0;
  size_t n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (touched[i]) {
      sum_sq += want[i] * want[i];
      ++n;
    }
  }
  const double rms = n > 0 ? std::sqrt(sum_sq / double(n)) : 0.0;
  const std::vector<float> g = to_floats<T>(got);
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t row = int64_t(i) / ld, col = int64_t(i) % ld;
    if (!touched[i]) {
      if (!same_bits(got[i], init[i])) {
        return ::testing::AssertionFailure()
               << what << ": (" << row << ", " << col << ") must be untouched: got " << g[i]
               << ", was " << to_floats<T>({init[i]})[0];
      }
      continue;
    }
    const double err = std::abs(double(g[i]) - want[i]);
    const double bound = tol * (std::abs(want[i]) + rms);
    if (!(err <= bound)) {
      return ::testing::AssertionFailure()
             << what << ": (" << row << ", " << col << "): got " << g[i] << ", want " << want[i]
             << ", tolerance " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> inv_freq_for(int64_t dr) {
  std::vector<float> f(size_t(dr / 2));
  for (int64_t i = 0; i < dr / 2; ++i) {
    f[size_t(i)] = float(1.0 / std::pow(10000.0, double(2 * i) / double(dr)));
  }
  return f;
}

// YaRN's attention factor for a scaling factor of 40 (DeepSeek-V3: 0.1·ln(40) + 1).
const float kYarnFactor = float(0.1 * std::log(40.0) + 1.0);

const std::vector<int32_t> kPositions = {0, 1, 7, 100, 1023, 4096, 30000};

// ---------------------------------------------------------------------------------------------
// mla_rope

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

// A [rows, ld] buffer of U(-2, 2) values with NaN in the row padding (columns >= used).
std::vector<float> padded_rows(int64_t rows, int64_t ld, int64_t used, uint32_t seed) {
  std::vector<float> x = random_floats(size_t(rows * ld), seed, -2.0f, 2.0f);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t c = used; c < ld; ++c) x[size_t(t * ld + c)] = kNaN;
  }
  return x;
}

// The query layout (H heads of qw, rope block last) and the key's k_pe alone (1 head of dr).
struct RopeLayout {
  const char* name;
  int64_t heads, w;
};

std::vector<RopeLayout> rope_layouts(const Dims& d) {
  return {{"q", d.H, d.qw()}, {"k_pe", 1, d.dr}};
}

TYPED_TEST(CudaMla, RopeMatchesReference) {
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
TYPED_TEST(CudaMla, RopeIsCudaRopeThenFactorBitwise) {
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
TYPED_TEST(CudaMla, RopeInverseUndoesForward) {
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

// ---------------------------------------------------------------------------------------------
// Absorbed LoRA of kv_b_proj

// A batch's segments and kv_b's slot pool (ranks 3 and 8 under max_rank 8, and a rank-0 slot).
struct Batch {
  const char* name;
  std::vector<LoraSegment> segs;
  int64_t rows;
};

const std::vector<int32_t> kRanks = {3, 8, 0};
const std::vector<float> kScales = {0.5f, 1.75f, 3.0f};
constexpr int64_t kMaxRank = 8;

std::vector<Batch> batches() {
  return {
      // base rows, slot 0 (rank 3), an empty segment, the rank-0 slot, slot 1 (rank 8), slot 0
      // again; row 9 lies in no segment.
      {"mixed", {{0, 2, -1}, {2, 4, 0}, {4, 4, 1}, {4, 5, 2}, {5, 8, 1}, {8, 9, 0}}, 10},
      // a decode batch of one-row segments (find_segment's fast path).
      {"decode",
       {{0, 1, 1}, {1, 2, -1}, {2, 3, 0}, {3, 4, 2}, {4, 5, 1}, {5, 6, 0}, {6, 7, -1}, {7, 8, 1}},
       8},
  };
}

// Slot s of row t, or -1 when the row is not adapted (no segment, slot −1 or rank 0).
std::vector<int32_t> adapted_slot(const Batch& b) {
  std::vector<int32_t> slot(size_t(b.rows), -1);
  for (const LoraSegment& s : b.segs) {
    if (s.slot < 0 || kRanks[size_t(s.slot)] == 0) continue;
    for (int64_t t = s.row_begin; t < s.row_end; ++t) slot[size_t(t)] = s.slot;
  }
  return slot;
}

// kv_b's pool for dims d: A [slots, max_rank, R], B [slots, H·kvw, max_rank], U(-0.5, 0.5),
// NaN past each slot's rank. The rows of B of the half the kernel must not read (B_V for
// absorb_q, B_K for absorb_out) are NaN too.
struct Pool {
  std::vector<float> A, B;
};

Pool make_pool(const Dims& d, bool nan_value_rows, uint32_t seed) {
  const int64_t n_slots = int64_t(kRanks.size()), d_out = d.H * d.kvw();
  Pool p;
  p.A = random_floats(size_t(n_slots * kMaxRank * d.R), seed, -0.5f, 0.5f);
  p.B = random_floats(size_t(n_slots * d_out * kMaxRank), seed + 1, -0.5f, 0.5f);
  for (int64_t s = 0; s < n_slots; ++s) {
    const int64_t r = kRanks[size_t(s)];
    for (int64_t j = r; j < kMaxRank; ++j) {
      for (int64_t k = 0; k < d.R; ++k) p.A[size_t((s * kMaxRank + j) * d.R + k)] = kNaN;
    }
    for (int64_t row = 0; row < d_out; ++row) {
      const int64_t i = row % d.kvw();
      const bool value_row = i >= d.dn;
      for (int64_t j = 0; j < kMaxRank; ++j) {
        if (j >= r || value_row == nan_value_rows) {
          p.B[size_t((s * d_out + row) * kMaxRank + j)] = kNaN;
        }
      }
    }
  }
  return p;
}

struct DevicePool {
  DeviceBuffer<float> A, B, scale;
  DeviceBuffer<int32_t> rank;
  DeviceBuffer<LoraSegment> segs;
  DeviceLoraSlots slots;
  DeviceSegments segments;
};

DevicePool upload_pool(const Dims& d, const Pool& p, const Batch& b) {
  DevicePool dp;
  dp.A = upload_vec(p.A);
  dp.B = upload_vec(p.B);
  dp.scale = upload_vec(kScales);
  dp.rank = upload_vec(kRanks);
  dp.segs = upload_vec(b.segs);
  dp.slots = DeviceLoraSlots{
      dp.A.data(), dp.B.data(), dp.rank.data(), dp.scale.data(), int64_t(kRanks.size()),
      kMaxRank,    d.R,         d.H * d.kvw()};
  dp.segments = DeviceSegments{dp.segs.data(), int32_t(b.segs.size()), b.rows};
  return dp;
}

// q_abs[t, h·lw + k] += c·Σ_j (Σ_i q[t, h·qw + i]·B_K[i, j])·A[j, k], in double.
TYPED_TEST(CudaMla, AbsorbQMatchesReference) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  Stream stream;
  uint32_t seed = 300;
  for (const Dims& d : kShapes) {
    for (const Batch& b : batches()) {
      const std::string tag = std::string(dtype<T>()) + " " + d.name + " " + b.name;
      const Pool pool = make_pool(d, /*nan_value_rows=*/true, seed += 10);
      const int64_t rows = b.rows, qw = d.qw(), lw = d.lw(), kvw = d.kvw();
      const int64_t ld_q = d.H * qw + 2, ld_abs = d.H * lw + 1;
      // q: the rope columns of each head are NaN (absorb_q reads q_nope only).
      std::vector<float> q = padded_rows(rows, ld_q, d.H * qw, seed + 2);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t h = 0; h < d.H; ++h) {
          for (int64_t i = d.dn; i < qw; ++i) q[size_t(t * ld_q + h * qw + i)] = kNaN;
        }
      }
      q = quantize<T>(q);
      // q_abs: the rope columns of each head are NaN (never written).
      std::vector<float> qa = padded_rows(rows, ld_abs, d.H * lw, seed + 3);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t h = 0; h < d.H; ++h) {
          for (int64_t k = d.R; k < lw; ++k) qa[size_t(t * ld_abs + h * lw + k)] = kNaN;
        }
      }
      qa = quantize<T>(qa);

      std::vector<double> want(qa.begin(), qa.end());
      std::vector<char> touched(qa.size(), 0);
      const std::vector<int32_t> slot_of = adapted_slot(b);
      const int64_t d_out = d.H * kvw;
      for (int64_t t = 0; t < rows; ++t) {
        const int32_t s = slot_of[size_t(t)];
        if (s < 0) continue;
        const int64_t r = kRanks[size_t(s)];
        const float* A = pool.A.data() + s * kMaxRank * d.R;
        const float* B = pool.B.data() + s * d_out * kMaxRank;
        for (int64_t h = 0; h < d.H; ++h) {
          std::vector<double> u(size_t(r), 0.0);
          for (int64_t j = 0; j < r; ++j) {
            for (int64_t i = 0; i < d.dn; ++i) {
              u[size_t(j)] += double(q[size_t(t * ld_q + h * qw + i)]) *
                              double(B[(h * kvw + i) * kMaxRank + j]);
            }
          }
          for (int64_t k = 0; k < d.R; ++k) {
            double acc = 0.0;
            for (int64_t j = 0; j < r; ++j) acc += u[size_t(j)] * double(A[j * d.R + k]);
            const size_t idx = size_t(t * ld_abs + h * lw + k);
            want[idx] += double(kScales[size_t(s)]) * acc;
            touched[idx] = 1;
          }
        }
      }

      DevicePool dp = upload_pool(d, pool, b);
      const auto d_q = upload_as<T>(q);
      std::vector<T> runs[2];
      for (std::vector<T>& run : runs) {
        auto d_qa = upload_as<T>(qa);
        mla_lora_absorb_q<T>(d_q.data(), ld_q, d.H, qw, d.dn, kvw, lw, dp.slots, dp.segments,
                             d_qa.data(), ld_abs, stream.get());
        stream.synchronize();
        run = d_qa.download();
      }
      EXPECT_TRUE(check_result<T>(tag + " q_abs", runs[0], to_elements<T>(qa), want, touched,
                                  ld_abs, rtol<T>()));
      EXPECT_TRUE(bitwise_equal(tag + " q_abs run to run", runs[1], runs[0]));
    }
  }
}

// out[t, h·dv + i] += c·Σ_j B_V[i, j]·(Σ_k A[j, k]·o_lat[t, h·lw + k]), in double.
TYPED_TEST(CudaMla, AbsorbOutMatchesReference) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  Stream stream;
  uint32_t seed = 500;
  for (const Dims& d : kShapes) {
    for (const Batch& b : batches()) {
      const std::string tag = std::string(dtype<T>()) + " " + d.name + " " + b.name;
      const Pool pool = make_pool(d, /*nan_value_rows=*/false, seed += 10);
      const int64_t rows = b.rows, lw = d.lw(), kvw = d.kvw();
      const int64_t ld_lat = d.H * lw + 3, ld_out = d.H * d.dv + 2;
      // o_lat: the rope columns of each head are NaN (the latent part is columns [0, R)).
      std::vector<float> o = padded_rows(rows, ld_lat, d.H * lw, seed + 2);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t h = 0; h < d.H; ++h) {
          for (int64_t k = d.R; k < lw; ++k) o[size_t(t * ld_lat + h * lw + k)] = kNaN;
        }
      }
      o = quantize<T>(o);
      const std::vector<float> out0 = quantize<T>(padded_rows(rows, ld_out, d.H * d.dv, seed + 3));

      std::vector<double> want(out0.begin(), out0.end());
      std::vector<char> touched(out0.size(), 0);
      const std::vector<int32_t> slot_of = adapted_slot(b);
      const int64_t d_out = d.H * kvw;
      for (int64_t t = 0; t < rows; ++t) {
        const int32_t s = slot_of[size_t(t)];
        if (s < 0) continue;
        const int64_t r = kRanks[size_t(s)];
        const float* A = pool.A.data() + s * kMaxRank * d.R;
        const float* B = pool.B.data() + s * d_out * kMaxRank;
        for (int64_t h = 0; h < d.H; ++h) {
          std::vector<double> u(size_t(r), 0.0);
          for (int64_t j = 0; j < r; ++j) {
            for (int64_t k = 0; k < d.R; ++k) {
              u[size_t(j)] += double(A[j * d.R + k]) * double(o[size_t(t * ld_lat + h * lw + k)]);
            }
          }
          for (int64_t i = 0; i < d.dv; ++i) {
            double acc = 0.0;
            for (int64_t j = 0; j < r; ++j) {
              acc += double(B[(h * kvw + d.dn + i) * kMaxRank + j]) * u[size_t(j)];
            }
            const size_t idx = size_t(t * ld_out + h * d.dv + i);
            want[idx] += double(kScales[size_t(s)]) * acc;
            touched[idx] = 1;
          }
        }
      }

      DevicePool dp = upload_pool(d, pool, b);
      const auto d_o = upload_as<T>(o);
      std::vector<T> runs[2];
      for (std::vector<T>& run : runs) {
        auto d_out_buf = upload_as<T>(out0);
        mla_lora_absorb_out<T>(d_o.data(), ld_lat, d.H, lw, d.dn, d.dv, kvw, dp.slots, dp.segments,
                               d_out_buf.data(), ld_out, stream.get());
        stream.synchronize();
        run = d_out_buf.download();
      }
      EXPECT_TRUE(check_result<T>(tag + " out", runs[0], to_elements<T>(out0), want, touched,
                                  ld_out, rtol<T>()));
      EXPECT_TRUE(bitwise_equal(tag + " out run to run", runs[1], runs[0]));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// sum_heads, copy_head_cols

struct SumCase {
  const char* name;
  int64_t rows, heads, w, off, n;
};

std::vector<SumCase> sum_cases() {
  std::vector<SumCase> cases;
  for (const Dims& d : kShapes) {
    cases.push_back({d.name, 9, d.H, d.P(), d.dn, d.dr});  // dk_pe = Σ_h dk_p[h][dn, dn + dr)
  }
  cases.push_back({"one head", 5, 1, 12, 3, 7});
  cases.push_back({"whole heads", 300, 5, 11, 0, 11});  // rows·n past one block of threads
  return cases;
}

TYPED_TEST(CudaMla, SumHeadsMatchesReference) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  Stream stream;
  uint32_t seed = 700;
  for (const SumCase& c : sum_cases()) {
    const std::string tag = std::string(dtype<T>()) + " " + c.name;
    const int64_t ld = c.heads * c.w + 1, ld_out = c.n + 2;
    // Columns outside [off, off + n) of each head are NaN: the kernel must not read them.
    std::vector<float> x = padded_rows(c.rows, ld, c.heads * c.w, seed++);
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int64_t h = 0; h < c.heads; ++h) {
        for (int64_t i = 0; i < c.w; ++i) {
          if (i < c.off || i >= c.off + c.n) x[size_t(t * ld + h * c.w + i)] = kNaN;
        }
      }
    }
    x = quantize<T>(x);
    const std::vector<float> out0 = quantize<T>(padded_rows(c.rows, ld_out, 0, seed++));
    std::vector<double> want(out0.begin(), out0.end());
    std::vector<char> touched(out0.size(), 0);
    std::vector<float> in_order(out0);  // fp32 in head order from 0.0f: the CPU engine's loop
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int64_t i = 0; i < c.n; ++i) {
        double acc = 0.0;
        float acc_f = 0.0f;
        for (int64_t h = 0; h < c.heads; ++h) {
          const float v = x[size_t(t * ld + h * c.w + c.off + i)];
          acc += double(v);
          acc_f += v;
        }
        want[size_t(t * ld_out + i)] = acc;
        in_order[size_t(t * ld_out + i)] = acc_f;
        touched[size_t(t * ld_out + i)] = 1;
      }
    }
    const auto d_x = upload_as<T>(x);
    auto d_out = upload_as<T>(out0);
    sum_heads<T>(d_x.data(), ld, c.rows, c.heads, c.w, c.off, c.n, d_out.data(), ld_out,
                 stream.get());
    stream.synchronize();
    const std::vector<T> got = d_out.download();
    EXPECT_TRUE(check_result<T>(tag, got, to_elements<T>(out0), want, touched, ld_out, rtol<T>()));
    EXPECT_TRUE(bitwise_equal(tag + " vs the in-order fp32 sum", got, to_elements<T>(in_order)));
  }
}

struct CopyCase {
  const char* name;
  int64_t src_w, src_off, dst_w, dst_off, n;
};

// MLA's moves between layouts (cpu_mla.cpp's dense forward and backward).
std::vector<CopyCase> copy_cases(const Dims& d) {
  const int64_t P = d.P();
  return {
      {"q -> q_p", d.qw(), 0, P, 0, d.qw()},
      {"kv nope -> k_p", d.kvw(), 0, P, 0, d.dn},
      {"kv v -> v_p", d.kvw(), d.dn, P, 0, d.dv},
      {"attn_p -> attn", P, 0, d.dv, 0, d.dv},
      {"dv_p -> dkv v", P, 0, d.kvw(), d.dn, d.dv},
      {"dk_p rope -> dq rope", P, d.dn, d.qw(), d.dn, d.dr},
  };
}

TYPED_TEST(CudaMla, CopyHeadColsMovesBits) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  Stream stream;
  uint32_t seed = 900;
  for (const Dims& d : kShapes) {
    for (const CopyCase& c : copy_cases(d)) {
      for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{130}}) {
        const std::string tag =
            std::string(dtype<T>()) + " " + d.name + " " + c.name + " rows " + std::to_string(rows);
        const int64_t ld_src = d.H * c.src_w + 3, ld_dst = d.H * c.dst_w + 1;
        // Source columns outside each head's block are NaN: copying one shows in dst.
        std::vector<float> src = padded_rows(rows, ld_src, d.H * c.src_w, seed++);
        for (int64_t t = 0; t < rows; ++t) {
          for (int64_t h = 0; h < d.H; ++h) {
            for (int64_t i = 0; i < c.src_w; ++i) {
              if (i < c.src_off || i >= c.src_off + c.n)
                src[size_t(t * ld_src + h * c.src_w + i)] = kNaN;
            }
          }
        }
        const std::vector<T> src_t = to_elements<T>(src);
        const std::vector<T> dst0 =
            to_elements<T>(padded_rows(rows, ld_dst, d.H * c.dst_w, seed++));
        std::vector<T> want = dst0;
        for (int64_t t = 0; t < rows; ++t) {
          for (int64_t h = 0; h < d.H; ++h) {
            for (int64_t i = 0; i < c.n; ++i) {
              want[size_t(t * ld_dst + h * c.dst_w + c.dst_off + i)] =
                  src_t[size_t(t * ld_src + h * c.src_w + c.src_off + i)];
            }
          }
        }
        const auto d_src = upload_vec(src_t);
        auto d_dst = upload_vec(dst0);
        copy_head_cols<T>(d_src.data(), ld_src, c.src_w, c.src_off, d_dst.data(), ld_dst, c.dst_w,
                          c.dst_off, rows, d.H, c.n, stream.get());
        stream.synchronize();
        EXPECT_TRUE(bitwise_equal(tag, d_dst.download(), want));
      }
    }
  }
}

// src_w 0: the shared rope key k_pe [rows, dr] copied into every head of the padded keys,
// as mla_attention_dense does.
TYPED_TEST(CudaMla, CopyHeadColsBroadcastsOneBlockToEveryHead) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  Stream stream;
  const int64_t rows = 9, dr = 6, heads = 5, P = 16, off = 10, ld_src = dr + 2;
  const std::vector<T> src = to_elements<T>(padded_rows(rows, ld_src, dr, 77));
  const std::vector<T> dst0 = to_elements<T>(padded_rows(rows, heads * P, heads * P, 78));
  std::vector<T> want = dst0;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < dr; ++i)
        want[size_t(t * heads * P + h * P + off + i)] = src[size_t(t * ld_src + i)];
  const auto d_src = upload_vec(src);
  auto d_dst = upload_vec(dst0);
  copy_head_cols<T>(d_src.data(), ld_src, 0, 0, d_dst.data(), heads * P, P, off, rows, heads, dr,
                    stream.get());
  stream.synchronize();
  EXPECT_TRUE(bitwise_equal(std::string(dtype<T>()) + " broadcast", d_dst.download(), want));
}

// ---------------------------------------------------------------------------------------------
// Host-side contract checks: no device needed (the pointers are never dereferenced).

template <class F>
void expect_contract(F&& call, const std::string& kernel, const char* what) {
  try {
    call();
    ADD_FAILURE() << kernel << ": no std::invalid_argument for " << what;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(kernel + ": ", 0), 0u)
        << what << ": the message does not start with \"" << kernel << ": \": " << e.what();
  }
}

TYPED_TEST(CudaMla, RopeContractViolationsThrowBeforeLaunch) {
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

TYPED_TEST(CudaMla, AbsorbContractViolationsThrowBeforeLaunch) {
  using T = TypeParam;
  T* p = reinterpret_cast<T*>(uintptr_t{0x1000});
  auto* ff = reinterpret_cast<const float*>(uintptr_t{0x2000});
  auto* fr = reinterpret_cast<const int32_t*>(uintptr_t{0x3000});
  auto* fs = reinterpret_cast<const LoraSegment*>(uintptr_t{0x4000});
  // Valid: H 2, dn 16, dr 8, dv 16, R 32 (qw 24, lw 40, kvw 32, d_out 64), max_rank 8.
  const DeviceLoraSlots ok{ff, ff, fr, ff, 3, 8, 32, 64};
  const DeviceSegments segs{fs, 2, 10};
  const std::string kq = "cuda::mla_lora_absorb_q";
  const std::string ko = "cuda::mla_lora_absorb_out";
  struct Q {
    const T* q = nullptr;
    int64_t ld_q = 48, heads = 2, qw = 24, dn = 16, kvw = 32, lw = 40;
    DeviceLoraSlots slots;
    DeviceSegments segs;
    T* q_abs = nullptr;
    int64_t ld_abs = 80;
  };
  struct O {
    const T* o = nullptr;
    int64_t ld_lat = 80, heads = 2, lw = 40, dn = 16, dv = 16, kvw = 32;
    DeviceLoraSlots slots;
    DeviceSegments segs;
    T* out = nullptr;
    int64_t ld_out = 32;
  };
  auto run_q = [](const Q& a) {
    mla_lora_absorb_q<T>(a.q, a.ld_q, a.heads, a.qw, a.dn, a.kvw, a.lw, a.slots, a.segs, a.q_abs,
                         a.ld_abs, nullptr);
  };
  auto run_o = [](const O& a) {
    mla_lora_absorb_out<T>(a.o, a.ld_lat, a.heads, a.lw, a.dn, a.dv, a.kvw, a.slots, a.segs, a.out,
                           a.ld_out, nullptr);
  };
  const Q q0{p, 48, 2, 24, 16, 32, 40, ok, segs, p, 80};
  const O o0{p, 80, 2, 40, 16, 16, 32, ok, segs, p, 32};
  auto bad_q = [&](const char* what, auto&& edit) {
    Q a = q0;
    edit(a);
    expect_contract([&] { run_q(a); }, kq, what);
  };
  auto bad_o = [&](const char* what, auto&& edit) {
    O a = o0;
    edit(a);
    expect_contract([&] { run_o(a); }, ko, what);
  };
  // Shared checks (slots, segments, the kv_b layout), both kernels.
  for (int64_t mr : {int64_t{0}, int64_t{129}, int64_t{-1}}) {
    bad_q("max_rank out of [1, 128]", [&](Q& a) { a.slots.max_rank = mr; });
    bad_o("max_rank out of [1, 128]", [&](O& a) { a.slots.max_rank = mr; });
  }
  bad_q("d_in == 0", [](Q& a) { a.slots.d_in = 0; });
  bad_o("max_slots < 0", [](O& a) { a.slots.max_slots = -1; });
  bad_q("segments.count < 0", [](Q& a) { a.segs.count = -1; });
  bad_o("segments.rows < 0", [](O& a) { a.segs.rows = -1; });
  bad_q("segments.data null", [](Q& a) { a.segs.data = nullptr; });
  bad_q("heads == 0", [](Q& a) { a.heads = 0; });
  bad_o("heads > 65535", [](O& a) { a.heads = 65536; });
  bad_q("d_out != heads * kvw", [](Q& a) { a.slots.d_out = 63; });
  bad_o("d_out != heads * kvw", [](O& a) { a.slots.d_out = 65; });
  bad_q("lw < R", [](Q& a) { a.lw = 31; });
  bad_o("lw < R", [](O& a) { a.lw = 31; });
  // absorb_q's own.
  bad_q("dn == 0", [](Q& a) { a.dn = 0; });
  bad_q("dn > qw", [](Q& a) { a.dn = 25; });
  bad_q("dn > kvw", [](Q& a) {
    a.qw = 48;
    a.ld_q = 96;
    a.dn = 40;
  });
  bad_q("ld_q < heads * qw", [](Q& a) { a.ld_q = 47; });
  bad_q("ld_abs < heads * lw", [](Q& a) { a.ld_abs = 79; });
  bad_q("q null", [](Q& a) { a.q = nullptr; });
  bad_q("q_abs null", [](Q& a) { a.q_abs = nullptr; });
  bad_q("slots.A null", [](Q& a) { a.slots.A = nullptr; });
  bad_q("slots.B null", [](Q& a) { a.slots.B = nullptr; });
  bad_q("slots.rank null", [](Q& a) { a.slots.rank = nullptr; });
  bad_q("slots.scale null", [](Q& a) { a.slots.scale = nullptr; });
  // absorb_out's own.
  bad_o("dn == 0", [](O& a) {
    a.dn = 0;
    a.dv = 32;
    a.ld_out = 64;
  });
  bad_o("dv == 0", [](O& a) {
    a.dv = 0;
    a.dn = 32;
  });
  bad_o("kvw != dn + dv", [](O& a) { a.dv = 15; });
  bad_o("ld_lat < heads * lw", [](O& a) { a.ld_lat = 79; });
  bad_o("ld_out < heads * dv", [](O& a) { a.ld_out = 31; });
  bad_o("o_lat null", [](O& a) { a.o = nullptr; });
  bad_o("out null", [](O& a) { a.out = nullptr; });
  bad_o("slots.A null", [](O& a) { a.slots.A = nullptr; });
  bad_o("slots.B null", [](O& a) { a.slots.B = nullptr; });
  bad_o("slots.scale null", [](O& a) { a.slots.scale = nullptr; });
  // No segments or no rows: a no-op before the pointer checks and any CUDA call.
  DeviceLoraSlots nulls = ok;
  nulls.A = nulls.B = nulls.scale = nullptr;
  nulls.rank = nullptr;
  EXPECT_NO_THROW(run_q(Q{nullptr, 48, 2, 24, 16, 32, 40, nulls, {nullptr, 0, 10}, nullptr, 80}));
  EXPECT_NO_THROW(run_q(Q{nullptr, 48, 2, 24, 16, 32, 40, nulls, {fs, 2, 0}, nullptr, 80}));
  EXPECT_NO_THROW(run_o(O{nullptr, 80, 2, 40, 16, 16, 32, nulls, {nullptr, 0, 10}, nullptr, 32}));
  EXPECT_NO_THROW(run_o(O{nullptr, 80, 2, 40, 16, 16, 32, nulls, {fs, 2, 0}, nullptr, 32}));
}

TYPED_TEST(CudaMla, SumAndCopyContractViolationsThrowBeforeLaunch) {
  using T = TypeParam;
  T* p = reinterpret_cast<T*>(uintptr_t{0x1000});
  T* p2 = reinterpret_cast<T*>(uintptr_t{0x8000});
  const std::string ks = "cuda::sum_heads";
  const std::string kc = "cuda::copy_head_cols";
  // sum_heads valid: ld 48, rows 2, heads 2, w 24, off 16, n 8, ld_out 8.
  auto sum = [&](const T* x, int64_t ld, int64_t rows, int64_t heads, int64_t w, int64_t off,
                 int64_t n, T* out, int64_t ld_out) {
    sum_heads<T>(x, ld, rows, heads, w, off, n, out, ld_out, nullptr);
  };
  expect_contract([&] { sum(p, 48, -1, 2, 24, 16, 8, p2, 8); }, ks, "rows < 0");
  expect_contract([&] { sum(p, 48, 2, 0, 24, 16, 8, p2, 8); }, ks, "heads == 0");
  expect_contract([&] { sum(p, 48, 2, 2, 0, 0, 0, p2, 8); }, ks, "w == 0");
  expect_contract([&] { sum(p, 48, 2, 2, 24, 16, -1, p2, 8); }, ks, "n < 0");
  expect_contract([&] { sum(p, 48, 2, 2, 24, -1, 8, p2, 8); }, ks, "off < 0");
  expect_contract([&] { sum(p, 48, 2, 2, 24, 17, 8, p2, 8); }, ks, "off + n > w");
  expect_contract([&] { sum(p, 47, 2, 2, 24, 16, 8, p2, 8); }, ks, "ld < heads * w");
  expect_contract([&] { sum(p, 48, 2, 2, 24, 16, 8, p2, 7); }, ks, "ld_out < n");
  expect_contract([&] { sum(nullptr, 48, 2, 2, 24, 16, 8, p2, 8); }, ks, "x null");
  expect_contract([&] { sum(p, 48, 2, 2, 24, 16, 8, nullptr, 8); }, ks, "out null");
  EXPECT_NO_THROW(sum(nullptr, 48, 0, 2, 24, 16, 8, nullptr, 8));
  EXPECT_NO_THROW(sum(nullptr, 48, 2, 2, 24, 16, 0, nullptr, 8));

  // copy_head_cols valid: ld_src 48, src_w 24, src_off 0, ld_dst 64, dst_w 32, dst_off 0,
  // rows 2, heads 2, n 24.
  struct C {
    const T* src;
    int64_t ld_src = 48, src_w = 24, src_off = 0;
    T* dst;
    int64_t ld_dst = 64, dst_w = 32, dst_off = 0, rows = 2, heads = 2, n = 24;
  };
  auto copy = [](const C& a) {
    copy_head_cols<T>(a.src, a.ld_src, a.src_w, a.src_off, a.dst, a.ld_dst, a.dst_w, a.dst_off,
                      a.rows, a.heads, a.n, nullptr);
  };
  const C c0{p, 48, 24, 0, p2, 64, 32, 0, 2, 2, 24};
  auto bad_c = [&](const char* what, auto&& edit) {
    C a = c0;
    edit(a);
    expect_contract([&] { copy(a); }, kc, what);
  };
  bad_c("rows < 0", [](C& a) { a.rows = -1; });
  bad_c("heads == 0", [](C& a) { a.heads = 0; });
  bad_c("n < 0", [](C& a) { a.n = -1; });
  // src_w 0 is the broadcast (every head reads the same columns), bounded by ld_src.
  EXPECT_NO_THROW(copy(C{p, 48, 0, 40, p2, 64, 32, 0, 0, 2, 8}));
  bad_c("src_w 0 with src_off + n > ld_src", [](C& a) {
    a.src_w = 0;
    a.src_off = 30;
  });
  bad_c("dst_w == 0", [](C& a) {
    a.dst_w = 0;
    a.n = 0;
  });
  bad_c("src_off < 0", [](C& a) { a.src_off = -1; });
  bad_c("src_off + n > src_w", [](C& a) { a.src_off = 1; });
  bad_c("dst_off < 0", [](C& a) { a.dst_off = -1; });
  bad_c("dst_off + n > dst_w", [](C& a) { a.dst_off = 9; });
  bad_c("ld_src < heads * src_w", [](C& a) { a.ld_src = 47; });
  bad_c("ld_dst < heads * dst_w", [](C& a) { a.ld_dst = 63; });
  bad_c("src null", [](C& a) { a.src = nullptr; });
  bad_c("dst null", [](C& a) { a.dst = nullptr; });
  EXPECT_NO_THROW(copy(C{nullptr, 48, 24, 0, nullptr, 64, 32, 0, 0, 2, 24}));
  EXPECT_NO_THROW(copy(C{nullptr, 48, 24, 0, nullptr, 64, 32, 0, 2, 2, 0}));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
