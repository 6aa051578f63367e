// llama2.c checkpoints: the real stories260K, synthetic files checked slice by slice, the q/k
// permutation checked against RoPE itself, and refusals of damaged files.

#include <array>
#include <cmath>

#include "loader_test_util.h"
#include "shared_fixtures.h"
#include "spindle/engine/loader.h"
#include "spindle/kernels/rope.h"

namespace spindle::loader_test {
namespace {

using engine::ModelWeights;

// A llama2.c file: 7-int header and a body of distinct floats in file order.
struct Llama2cFile {
  std::array<int32_t, 7> header;  // dim, hidden, layers, heads, kv heads, vocab, seq_len
  std::vector<float> body;

  std::string bytes() const {
    std::string out(reinterpret_cast<const char*>(header.data()), 28);
    out.append(reinterpret_cast<const char*>(body.data()), body.size() * 4);
    return out;
  }
};

Llama2cFile synthetic(int32_t vocab) {
  Llama2cFile f{{8, 12, 2, 2, 1, vocab, 4}, {}};
  const int64_t dim = 8, hidden = 12, L = 2, kv_dim = 4, V = std::abs(vocab), seq = 4, hd = 4;
  const int64_t n = V * dim +
                    L * (dim + dim * dim + 2 * kv_dim * dim + dim * dim + dim + 3 * hidden * dim) +
                    dim + 2 * seq * hd / 2 + (vocab < 0 ? V * dim : 0);
  for (int64_t i = 0; i < n; ++i) f.body.push_back(float(i) * 0.25f - 100.0f);
  return f;
}

// Float at element offset `at` of the body (file offset 28 + 4·at).
float body_at(const Llama2cFile& f, int64_t at) {
  return f.body.at(size_t(at));
}

TEST(Llama2c, SyntheticFileLandsInTheRightTensorsWithQkPermuted) {
  for (int32_t vocab : {10, -10}) {
    SCOPED_TRACE(vocab);
    TempDir dir("l2c");
    const Llama2cFile f = synthetic(vocab);
    write_bytes(dir / "m.bin", f.bytes());
    const ModelWeights w = engine::load_model(dir / "m.bin");
    const auto& c = w.config;
    EXPECT_EQ(c.arch, engine::Arch::llama);
    EXPECT_EQ(c.head_dim, 4);
    EXPECT_EQ(c.vocab_size, 10);
    EXPECT_EQ(c.tie_embeddings, vocab > 0);
    EXPECT_EQ(c.name, (dir / "m.bin").string());
    EXPECT_EQ(w.lm_head.empty(), vocab > 0);

    int64_t off = 0;
    auto expect_slice = [&](const Tensor& t, int64_t start, const char* what) {
      for (int64_t i = 0; i < t.numel(); ++i) {
        ASSERT_EQ(t.data()[i], body_at(f, start + i)) << what << " element " << i;
      }
    };
    expect_slice(w.tok_emb, off, "tok_emb");
    off += 80;
    for (int l = 0; l < 2; ++l) expect_slice(w.layers[size_t(l)].attn_norm, off + 8 * l, "rms_att");
    off += 16;
    // wq: HF row h·hd + i = llama2.c row h·hd + 2i; row h·hd + i + hd/2 = row h·hd + 2i + 1.
    const int64_t wq_off = off;
    for (int l = 0; l < 2; ++l) {
      const Tensor& wq = w.layers[size_t(l)].wq;
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t i = 0; i < 2; ++i) {
          for (int64_t col = 0; col < 8; ++col) {
            EXPECT_EQ(wq.row(h * 4 + i)[col],
                      body_at(f, wq_off + l * 64 + (h * 4 + 2 * i) * 8 + col));
            EXPECT_EQ(wq.row(h * 4 + i + 2)[col],
                      body_at(f, wq_off + l * 64 + (h * 4 + 2 * i + 1) * 8 + col));
          }
        }
      }
    }
    off += 128;
    const Tensor& wk0 = w.layers[0].wk;  // one kv head of 4 rows
    EXPECT_EQ(wk0.row(0)[0], body_at(f, off + 0 * 8));
    EXPECT_EQ(wk0.row(1)[0], body_at(f, off + 2 * 8));
    EXPECT_EQ(wk0.row(2)[0], body_at(f, off + 1 * 8));
    EXPECT_EQ(wk0.row(3)[0], body_at(f, off + 3 * 8));
    off += 64;
    for (int l = 0; l < 2; ++l) expect_slice(w.layers[size_t(l)].wv, off + 32 * l, "wv");
    off += 64;
    for (int l = 0; l < 2; ++l) expect_slice(w.layers[size_t(l)].wo, off + 64 * l, "wo");
    off += 128;
    for (int l = 0; l < 2; ++l) expect_slice(w.layers[size_t(l)].ffn_norm, off + 8 * l, "rms_ffn");
    off += 16;
    for (int l = 0; l < 2; ++l) expect_slice(w.layers[size_t(l)].w_gate, off + 96 * l, "w1");
    off += 192;
    for (int l = 0; l < 2; ++l) expect_slice(w.layers[size_t(l)].w_down, off + 96 * l, "w2");
    off += 192;
    for (int l = 0; l < 2; ++l) expect_slice(w.layers[size_t(l)].w_up, off + 96 * l, "w3");
    off += 192;
    expect_slice(w.final_norm, off, "rms_final");
    off += 8 + 16;  // the two freq_cis tables are skipped
    if (vocab < 0) expect_slice(w.lm_head, off, "wcls");
  }
}

TEST(Llama2c, EveryTruncationAndAnyTrailingByteIsAnErrorNamingTheFile) {
  TempDir dir("l2c");
  const std::string full = synthetic(-10).bytes();
  const auto p = dir / "cut.bin";
  for (size_t k = 0; k < full.size(); ++k) {
    write_bytes(p, full.substr(0, k));
    const auto caught = catch_error([&] { engine::load_llama2c(p); });
    ASSERT_TRUE(caught.thrown) << k;
    EXPECT_TRUE(caught.has("cut.bin")) << caught.message;
    if (k >= 28) {
      EXPECT_TRUE(caught.has(fmt::format("{} bytes missing", full.size() - k))) << caught.message;
    }
  }
  write_bytes(p, full.substr(0, full.size() - 4));
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "4 bytes missing", "'wcls'");
  write_bytes(p, full.substr(0, 28 + 4 * 85));
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "'rms_att_weight'");
  write_bytes(p, full + "xyz!");
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "4 trailing bytes");
  // A tied header over an untied file: the extra bytes are exactly a classifier.
  std::string tied = full;
  const int32_t v = 10;
  std::memcpy(tied.data() + 20, &v, 4);
  write_bytes(p, tied);
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "trailing", "vocab_size be negative");
}

TEST(Llama2c, BadHeadersAreRefusedBeforeAllocating) {
  TempDir dir("l2c");
  const auto p = dir / "h.bin";
  const char* fields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                           "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    for (int32_t bad : {-3, 0, INT32_MIN}) {
      if (i == 5 && bad != 0) continue;  // a negative vocab is legal (untied)
      Llama2cFile f = synthetic(10);
      f.header[size_t(i)] = bad;
      write_bytes(p, f.bytes());
      EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "h.bin", fields[i], std::to_string(bad));
    }
  }
  Llama2cFile f = synthetic(10);
  f.header = {1 << 30, INT32_MAX, INT32_MAX, 2, 1, INT32_MIN, INT32_MAX};
  write_bytes(p, f.bytes());
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "h.bin", "implausible");
  f.header = {10, 12, 2, 3, 1, 10, 4};
  write_bytes(p, f.bytes());
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "dim 10 is not a multiple of n_heads 3");
  f.header = {8, 12, 2, 2, 3, 10, 4};
  write_bytes(p, f.bytes());
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "n_kv_heads");
  f.header[0] = 0x616b3432;
  write_bytes(p, f.bytes());
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "ak42", "version");
  write_bytes(p, "abc");
  EXPECT_SPINDLE_ERROR(engine::load_llama2c(p), "h.bin", "too short");
}

TEST(Llama2c, Stories260KConfig) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const ModelWeights w = engine::load_model(bin);
  const auto& c = w.config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  EXPECT_EQ(c.name, bin.string());
  EXPECT_EQ(w.layers.size(), 5u);
  // 260K parameters, as the name says.
  EXPECT_EQ(w.bytes() / 4,
            size_t(512 * 64 + 5 * (64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 64 + 3 * 172 * 64) + 64));
  const std::string raw = read_bytes(bin);
  EXPECT_EQ(0, std::memcmp(w.tok_emb.data(), raw.data() + 28, w.tok_emb.bytes()));
}

// Rows of layer `layer`'s stacked tensor, straight from the file.
std::vector<float> raw_rows(const std::string& raw, int64_t byte_off, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), raw.data() + byte_off, size_t(n) * 4);
  return v;
}

std::vector<float> matvec(const float* w, int64_t rows, int64_t cols, const std::vector<float>& x) {
  std::vector<float> y(static_cast<size_t>(rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[size_t(r)] += w[r * cols + c] * x[size_t(c)];
  }
  return y;
}

// Independent check of the q/k permutation: RoPE (interleaved) on the original projection
// and RoPE (half) on the permuted one must give the same vectors up to the row permutation,
// and the same attention scores.
TEST(Llama2c, Stories260KQkPermutationAgreesWithRope) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const ModelWeights w = engine::load_llama2c(bin);
  const std::string raw = read_bytes(bin);
  const int64_t dim = 64, L = 5, V = 512, hd = 8, nh = 8, nkv = 4, kv_dim = 32;
  const int64_t wq_base = 28 + 4 * (V * dim + L * dim);
  const int64_t wk_base = wq_base + 4 * L * dim * dim;

  std::vector<float> inv_freq(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i) {
    inv_freq[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(hd));
  }
  std::mt19937 rng(42);
  std::normal_distribution<float> n01;
  for (int64_t layer : {0, 3, 4}) {
    for (int32_t pos : {0, 1, 17, 511}) {
      SCOPED_TRACE(fmt::format("layer {} pos {}", layer, pos));
      std::vector<float> x(static_cast<size_t>(dim));
      for (float& v : x) v = n01(rng);
      const auto wq_orig = raw_rows(raw, wq_base + 4 * layer * dim * dim, dim * dim);
      const auto wk_orig = raw_rows(raw, wk_base + 4 * layer * kv_dim * dim, kv_dim * dim);
      auto q_orig = matvec(wq_orig.data(), dim, dim, x);
      auto k_orig = matvec(wk_orig.data(), kv_dim, dim, x);
      auto q_perm = matvec(w.layers[size_t(layer)].wq.data(), dim, dim, x);
      auto k_perm = matvec(w.layers[size_t(layer)].wk.data(), kv_dim, dim, x);
      using kernels::RopeStyle;
      kernels::rope(q_orig.data(), dim, 1, nh, hd, &pos, inv_freq.data(), RopeStyle::interleaved);
      kernels::rope(k_orig.data(), kv_dim, 1, nkv, hd, &pos, inv_freq.data(),
                    RopeStyle::interleaved);
      kernels::rope(q_perm.data(), dim, 1, nh, hd, &pos, inv_freq.data(), RopeStyle::half);
      kernels::rope(k_perm.data(), kv_dim, 1, nkv, hd, &pos, inv_freq.data(), RopeStyle::half);
      auto expect_permuted = [&](const std::vector<float>& orig, const std::vector<float>& perm,
                                 int64_t heads) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t i = 0; i < hd / 2; ++i) {
            EXPECT_FLOAT_EQ(perm[size_t(h * hd + i)], orig[size_t(h * hd + 2 * i)]);
            EXPECT_FLOAT_EQ(perm[size_t(h * hd + i + hd / 2)], orig[size_t(h * hd + 2 * i + 1)]);
          }
        }
      };
      expect_permuted(q_orig, q_perm, nh);
      expect_permuted(k_orig, k_perm, nkv);
      for (int64_t h = 0; h < nh; ++h) {  // GQA: query head h reads kv head h / 2
        float s_orig = 0, s_perm = 0;
        for (int64_t d = 0; d < hd; ++d) {
          s_orig += q_orig[size_t(h * hd + d)] * k_orig[size_t(h / 2 * hd + d)];
          s_perm += q_perm[size_t(h * hd + d)] * k_perm[size_t(h / 2 * hd + d)];
        }
        EXPECT_NEAR(s_orig, s_perm, 1e-4f * (1.0f + std::fabs(s_orig)));
      }
    }
  }
}

}  // namespace
}  // namespace spindle::loader_test
