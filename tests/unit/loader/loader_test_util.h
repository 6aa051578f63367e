#pragma once
// Helpers for loader tests: temp dirs, error capture, tiny random models, raw file edits.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "spindle/core/error.h"
#include "spindle/engine/weights.h"

namespace spindle::loader_test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ =
        fs::temp_directory_path() / ("spindle_loader_" + tag + "_" + std::to_string(::getpid()) +
                                     "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

struct Caught {
  bool thrown = false;
  ErrorCode code = ErrorCode::internal;
  std::string message;
  bool has(const std::string& s) const { return message.find(s) != std::string::npos; }
};

// Runs f; captures a spindle::Error. Any other exception escapes and fails the test.
inline Caught catch_error(const std::function<void()>& f) {
  Caught c;
  try {
    f();
  } catch (const Error& e) {
    c.thrown = true;
    c.code = e.code();
    c.message = e.what();
  }
  return c;
}

// Expects f to throw a spindle::Error whose message contains every string in `needles`.
#define EXPECT_SPINDLE_ERROR(expr, ...)                                                  \
  do {                                                                                   \
    const auto caught_ = ::spindle::loader_test::catch_error([&] { (void)(expr); });     \
    EXPECT_TRUE(caught_.thrown) << #expr " did not throw";                               \
    for (const std::string& needle_ : std::initializer_list<std::string>{__VA_ARGS__}) { \
      EXPECT_TRUE(caught_.has(needle_))                                                  \
          << "message lacks '" << needle_ << "': " << caught_.message;                   \
    }                                                                                    \
  } while (0)

inline engine::ModelConfig tiny_llama() {
  engine::ModelConfig c;
  c.arch = engine::Arch::llama;
  c.dim = 16;
  c.hidden_dim = 40;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 32;
  c.max_seq_len = 64;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  c.tie_embeddings = true;
  c.name = "tiny-llama";
  return c;
}

inline engine::ModelConfig tiny_qwen3() {
  engine::ModelConfig c = tiny_llama();
  c.arch = engine::Arch::qwen3;
  c.head_dim = 6;  // decoupled from dim / n_heads, as Qwen3 does
  c.rope_theta = 1000000.0f;
  c.rms_eps = 1e-6f;
  c.tie_embeddings = false;
  c.bos_id = 0;
  c.eos_id = 3;
  c.name = "tiny-qwen3";
  return c;
}

// Qwen3-MoE: layer 0 routed (4 experts, top 2), layer 1 dense (mlp_only_layers).
inline engine::ModelConfig tiny_qwen3_moe() {
  engine::ModelConfig c = tiny_qwen3();
  c.arch = engine::Arch::qwen3_moe;
  c.moe = {.n_experts = 4,
           .top_k = 2,
           .expert_dim = 6,
           .sparse_step = 1,
           .dense_layers = {1},
           .norm_topk = true,
           .aux_loss_coef = 0.01f};
  c.name = "tiny-qwen3-moe";
  return c;
}

// DeepSeek-V3: MLA (a query latent, v_head_dim ≠ the qk head), layer 0 dense
// (first_k_dense_replace), layer 1 routed: 4 experts in 2 groups, top 2, a shared expert.
inline engine::ModelConfig tiny_deepseek_v3() {
  engine::ModelConfig c = tiny_qwen3();
  c.arch = engine::Arch::deepseek_v3;
  c.mla = {.q_lora_rank = 8,
           .kv_lora_rank = 6,
           .qk_nope_head_dim = 4,
           .qk_rope_head_dim = 2,
           .v_head_dim = 4};
  c.head_dim = c.mla.qk_head_dim();
  c.n_kv_heads = c.n_heads;
  c.rope_scaling = engine::RopeScaling{.type = engine::RopeScalingType::yarn,
                                       .factor = 4.0f,
                                       .original_max_position = 16,
                                       .mscale = 0.7f,
                                       .mscale_all_dim = 0.7f};
  c.moe = {.n_experts = 4,
           .top_k = 2,
           .expert_dim = 6,
           .norm_topk = true,
           .scoring = engine::RouterScoring::sigmoid,
           .n_group = 2,
           .topk_group = 1,
           .routed_scaling = 1.5f,
           .n_shared_experts = 1,
           .first_dense = 1,
           .correction_bias = true};
  c.name = "tiny-deepseek-v3";
  return c;
}

// Random weights with every tensor the config asks for. Values are spread over several
// binades so that f16/bf16 rounding is exercised.
inline engine::ModelWeights random_model(const engine::ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-8, 2);
  auto fill = [&](Shape shape) {
    Tensor t(std::move(shape));
    for (float& x : t.span()) x = std::ldexp(u(rng), e(rng));
    return t;
  };
  engine::ModelWeights w;
  w.config = c;
  w.layers.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (c.sparse_layer(l)) w.layers[size_t(l)].experts.resize(size_t(c.moe.n_experts));
  }
  engine::for_each_hf_tensor_shape(
      w, [&](const std::string&, Tensor& t, const Shape& shape) { t = fill(shape); });
  return w;
}

// Every tensor of `got` equals `want` after `round` (identity for fp32), bit for bit.
inline void expect_same_weights(const engine::ModelWeights& want, const engine::ModelWeights& got,
                                const std::function<float(float)>& round = {}) {
  std::vector<std::pair<std::string, const Tensor*>> a, b;
  engine::for_each_hf_tensor(want, [&](const std::string& n, const Tensor& t) {
    a.push_back({n, &t});
  });
  engine::for_each_hf_tensor(got, [&](const std::string& n, const Tensor& t) {
    b.push_back({n, &t});
  });
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second->shape(), b[i].second->shape()) << a[i].first;
    const float* x = a[i].second->data();
    const float* y = b[i].second->data();
    size_t mismatches = 0;
    for (int64_t j = 0; j < a[i].second->numel(); ++j) {
      const float w = round ? round(x[j]) : x[j];
      uint32_t wb, yb;
      std::memcpy(&wb, &w, 4);
      std::memcpy(&yb, &y[j], 4);
      mismatches += wb != yb;
    }
    EXPECT_EQ(mismatches, 0u) << a[i].first;
  }
}

inline std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A safetensors file from raw header JSON (unpadded) and `data_bytes` zero bytes of data.
inline std::string safetensors_bytes(const std::string& header_json, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header_json.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(n >> (8 * i)));
  return out + header_json + std::string(data_bytes, '\0');
}

}  // namespace spindle::loader_test
