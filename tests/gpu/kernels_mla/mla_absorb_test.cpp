// cuda::mla_lora_absorb_q / _out (kv_b_proj's LoRA, absorbed) against double references on
// mixed and decode batches, run to run bitwise; their host-side contract (mla_test_util.h).

#include "mla_test_util.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class CudaMlaAbsorb : public ::testing::Test {};
TYPED_TEST_SUITE(CudaMlaAbsorb, ElementTypes, TypeNames);

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

// fn(t, h, s, r, A_s, B_s) for every adapted row t of b (slot s, rank r > 0) and head h: the
// references' walk over the rows the kernels must change.
template <class F>
void for_each_adapted(const Dims& d, const Batch& b, const Pool& pool, F&& fn) {
  const std::vector<int32_t> slot_of = adapted_slot(b);
  const int64_t d_out = d.H * d.kvw();
  for (int64_t t = 0; t < b.rows; ++t) {
    const int32_t s = slot_of[size_t(t)];
    if (s < 0) continue;
    const float* A = pool.A.data() + s * kMaxRank * d.R;
    const float* B = pool.B.data() + s * d_out * kMaxRank;
    for (int64_t h = 0; h < d.H; ++h) fn(t, h, s, int64_t(kRanks[size_t(s)]), A, B);
  }
}

// q_abs[t, h·lw + k] += c·Σ_j (Σ_i q[t, h·qw + i]·B_K[i, j])·A[j, k], in double.
TYPED_TEST(CudaMlaAbsorb, AbsorbQMatchesReference) {
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
      nan_head_cols(q, rows, ld_q, d.H, qw, d.dn, qw);
      q = quantize<T>(q);
      // q_abs: the rope columns of each head are NaN (never written).
      std::vector<float> qa = padded_rows(rows, ld_abs, d.H * lw, seed + 3);
      nan_head_cols(qa, rows, ld_abs, d.H, lw, d.R, lw);
      qa = quantize<T>(qa);

      std::vector<double> want(qa.begin(), qa.end());
      std::vector<char> touched(qa.size(), 0);
      for_each_adapted(
          d, b, pool,
          [&](int64_t t, int64_t h, int32_t s, int64_t r, const float* A, const float* B) {
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
          });

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
TYPED_TEST(CudaMlaAbsorb, AbsorbOutMatchesReference) {
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
      nan_head_cols(o, rows, ld_lat, d.H, lw, d.R, lw);
      o = quantize<T>(o);
      const std::vector<float> out0 = quantize<T>(padded_rows(rows, ld_out, d.H * d.dv, seed + 3));

      std::vector<double> want(out0.begin(), out0.end());
      std::vector<char> touched(out0.size(), 0);
      for_each_adapted(
          d, b, pool,
          [&](int64_t t, int64_t h, int32_t s, int64_t r, const float* A, const float* B) {
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
          });

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

TYPED_TEST(CudaMlaAbsorb, AbsorbContractViolationsThrowBeforeLaunch) {
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

}  // namespace
}  // namespace spindle::kernels::cuda::test
