// cuda::sum_heads and cuda::copy_head_cols (MLA's per-head column layouts) against references,
// bitwise; their host-side contract (mla_test_util.h).

#include "mla_test_util.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class CudaMlaLayout : public ::testing::Test {};
TYPED_TEST_SUITE(CudaMlaLayout, ElementTypes, TypeNames);

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

TYPED_TEST(CudaMlaLayout, SumHeadsMatchesReference) {
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

TYPED_TEST(CudaMlaLayout, CopyHeadColsMovesBits) {
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
        nan_head_cols(src, rows, ld_src, d.H, c.src_w, 0, c.src_off);
        nan_head_cols(src, rows, ld_src, d.H, c.src_w, c.src_off + c.n, c.src_w);
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
TYPED_TEST(CudaMlaLayout, CopyHeadColsBroadcastsOneBlockToEveryHead) {
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

TYPED_TEST(CudaMlaLayout, SumAndCopyContractViolationsThrowBeforeLaunch) {
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
