// One GPU forward against the CPU engine on tiny random Llama and Qwen3 models, in both
// precisions: ragged batches mixing prefill, chunked prefill and decode rows (block size 4, so
// sequences straddle blocks), all-token and last-token logits, the kept activations, and the
// validation errors (raised before the cache is touched).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "gpu_fixtures.h"
#include "spindle/core/error.h"
#include "spindle/engine_cuda/device_model.h"

namespace spindle::engine_cuda {
namespace {

using engine::Arch;
using engine::BatchSequence;
using engine::LogitsFor;
using testing::CpuSequence;
using testing::rows_close;

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

// Tolerance relative to each row's largest |logit|: fp32 1e-4; bf16 weights, activations and
// KV cache (fp32 accumulation) 6e-2.
float tolerance(Precision p) {
  return p == Precision::fp32 ? 1e-4f : 6e-2f;
}

void check_against_cpu(const engine::ModelConfig& config, Precision p) {
  const engine::ModelWeights w = testing::random_weights(config, 21);
  const engine::ModelConfig& c = w.config;
  const DeviceWeights dw(w, p);
  DeviceModel model(dw);
  DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 4}, p);
  std::mt19937 rng(3);
  // Step 1: three fresh sequences of 1, 5 and 17 tokens; every token's logits.
  const std::vector<std::vector<int32_t>> first = {random_tokens(rng, 1, c.vocab_size),
                                                   random_tokens(rng, 5, c.vocab_size),
                                                   random_tokens(rng, 17, c.vocab_size)};
  // Step 2: seq 0 decodes one token, seq 1 a chunk of 3 (chunked prefill), seq 2 one token,
  // a new seq 3 prefills 6; last-token logits only.
  const std::vector<std::vector<int32_t>> second = {
      random_tokens(rng, 1, c.vocab_size), random_tokens(rng, 3, c.vocab_size),
      random_tokens(rng, 1, c.vocab_size), random_tokens(rng, 6, c.vocab_size)};
  std::vector<SeqId> seqs;
  for (int i = 0; i < 4; ++i) seqs.push_back(cache.create());

  std::vector<CpuSequence> cpu;
  for (int i = 0; i < 4; ++i) cpu.emplace_back(w, nullptr);
  std::vector<std::vector<float>> want1, want2;
  for (int i = 0; i < 3; ++i) want1.push_back(cpu[size_t(i)].feed(first[size_t(i)]));
  for (int i = 0; i < 4; ++i) want2.push_back(cpu[size_t(i)].feed(second[size_t(i)]));

  DeviceForwardState st;
  std::vector<BatchSequence> b1;
  for (int i = 0; i < 3; ++i) b1.push_back({seqs[size_t(i)], first[size_t(i)], -1});
  model.forward(b1, cache, nullptr, st, {.logits = LogitsFor::all_tokens});
  ASSERT_EQ(st.host_logits.dim(0), 23);
  int64_t row = 0;
  for (int i = 0; i < 3; ++i) {
    const int64_t n = int64_t(first[size_t(i)].size());
    EXPECT_TRUE(rows_close(st.host_logits.row(row), want1[size_t(i)].data(), n, c.vocab_size,
                           tolerance(p), "step 1 sequence " + std::to_string(i)));
    row += n;
  }

  std::vector<BatchSequence> b2;
  for (int i = 0; i < 4; ++i) b2.push_back({seqs[size_t(i)], second[size_t(i)], -1});
  model.forward(b2, cache, nullptr, st);  // last_token
  ASSERT_EQ(st.host_logits.dim(0), 4);
  for (int i = 0; i < 4; ++i) {
    const int64_t n = int64_t(second[size_t(i)].size());
    EXPECT_TRUE(rows_close(st.host_logits.row(i), want2[size_t(i)].data() + (n - 1) * c.vocab_size,
                           1, c.vocab_size, tolerance(p),
                           "step 2 (last token) sequence " + std::to_string(i)));
    EXPECT_EQ(cache.length(seqs[size_t(i)]),
              int64_t((i < 3 ? first[size_t(i)].size() : 0) + second[size_t(i)].size()));
  }
}

void check_against_cpu(Arch arch, Precision p) {
  check_against_cpu(testing::gpu_tiny_config(arch), p);
}

TEST(GpuModel, LlamaFp32MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu(Arch::llama, Precision::fp32);
}
TEST(GpuModel, Qwen3Fp32MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu(Arch::qwen3, Precision::fp32);
}
// YaRN rope scaling on a dense model (Qwen3's long-context setting): YaRN's inverse
// frequencies, and its attention factor folded into the softmax scale as on the CPU.
TEST(GpuModel, Qwen3WithYarnFp32MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  engine::ModelConfig c = testing::gpu_tiny_config(Arch::qwen3);
  c.rope_scaling = engine::RopeScaling{
      .type = engine::RopeScalingType::yarn, .factor = 4.0f, .original_max_position = 16};
  check_against_cpu(c, Precision::fp32);
}
// Multi-head Latent Attention (DeepSeek-V3 shape: query latent, YaRN with an attention factor,
// interleaved rope, sigmoid group-limited routing, a shared expert): prefill and chunked
// prefill read the latent cache through the absorbed form and must equal the CPU engine.
TEST(GpuModel, DeepseekV3Fp32MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu(Arch::deepseek_v3, Precision::fp32);
}
// Routed experts (fp32, the exactness mode: a bf16 router may pick another expert on a near
// tie, which is not an error but fails an elementwise comparison).
TEST(GpuModel, Qwen3MoeFp32MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu(Arch::qwen3_moe, Precision::fp32);
}

// A routed-experts decode step never becomes a CUDA graph (its routing is chosen on the host
// mid-forward); with graphs asked for, decode steps run eagerly and still equal the CPU.
TEST(GpuModel, Qwen3MoeDecodeIsNeverCapturedAndMatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w =
      testing::random_weights(testing::gpu_tiny_config(Arch::qwen3_moe), 23);
  const engine::ModelConfig& c = w.config;
  const DeviceWeights dw(w, Precision::fp32);
  DeviceModel model(dw);
  DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 2}, Precision::fp32);
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = random_tokens(rng, 6, c.vocab_size);
  CpuSequence cpu(w, nullptr);
  cpu.feed(prompt);
  const SeqId s = cache.create();
  DeviceForwardState st;
  const BatchSequence p0{s, prompt, -1};
  model.forward({&p0, 1}, cache, nullptr, st, {.use_graph = true});
  for (int step = 0; step < 3; ++step) {
    const std::vector<int32_t> tok = random_tokens(rng, 1, c.vocab_size);
    const std::vector<float> want = cpu.feed(tok);
    const BatchSequence b{s, tok, -1};
    model.forward({&b, 1}, cache, nullptr, st, {.use_graph = true});
    EXPECT_TRUE(rows_close(st.host_logits.data(), want.data(), 1, c.vocab_size, 1e-4f,
                           "decode step " + std::to_string(step)));
  }
  EXPECT_EQ(model.cached_graphs(), 0u);
}

TEST(GpuModel, LlamaBf16MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu(Arch::llama, Precision::bf16);
}
TEST(GpuModel, Qwen3Bf16MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  check_against_cpu(Arch::qwen3, Precision::bf16);
}

// keep_activations: every layer's intermediates equal the CPU's LayerActivations (fp32 mode).
TEST(GpuModel, KeptActivationsMatchCpuLayerActivations) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w = testing::random_weights(testing::gpu_tiny_config(Arch::qwen3), 5);
  const engine::ModelConfig& c = w.config;
  const std::vector<int32_t> p0 = {1, 7, 9, 11, 3, 4, 5}, p1 = {2, 8, 13};

  const engine::Model cpu(w);
  engine::KvCache ccache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 2});
  const std::vector<BatchSequence> cb = {{ccache.create(), p0, -1}, {ccache.create(), p1, -1}};
  engine::ForwardState cs;
  cpu.forward(cb, ccache, nullptr, cs, {.logits = LogitsFor::all_tokens, .keep_activations = true});

  const DeviceWeights dw(w, Precision::fp32);
  DeviceModel model(dw);
  DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 2}, Precision::fp32);
  const std::vector<BatchSequence> gb = {{cache.create(), p0, -1}, {cache.create(), p1, -1}};
  DeviceForwardState st;
  model.forward(gb, cache, nullptr, st,
                {.logits = LogitsFor::all_tokens, .keep_activations = true});
  ASSERT_EQ(st.layers.size(), size_t(c.n_layers));
  EXPECT_EQ(st.T, 10);
  EXPECT_EQ(st.positions, cs.positions);
  EXPECT_EQ(st.tokens, cs.tokens);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const auto& g = st.layers[size_t(l)];
    const auto& r = cs.layers[size_t(l)];
    const std::pair<const DeviceTensor*, const Tensor*> pairs[] = {
        {&g.x_in, &r.x_in},
        {&g.xn_attn, &r.xn_attn},
        {&g.inv_rms_attn, &r.inv_rms_attn},
        {&g.q_pre, &r.q_pre},
        {&g.k_pre, &r.k_pre},
        {&g.inv_rms_q, &r.inv_rms_q},
        {&g.inv_rms_k, &r.inv_rms_k},
        {&g.q, &r.q},
        {&g.k, &r.k},
        {&g.v, &r.v},
        {&g.attn, &r.attn},
        {&g.x_mid, &r.x_mid},
        {&g.xn_mlp, &r.xn_mlp},
        {&g.inv_rms_mlp, &r.inv_rms_mlp},
        {&g.gate, &r.gate},
        {&g.up, &r.up},
        {&g.act, &r.act}};
    const char* names[] = {
        "x_in", "xn_attn", "inv_rms_attn", "q_pre", "k_pre",  "inv_rms_q",   "inv_rms_k", "q",
        "k",    "v",       "attn",         "x_mid", "xn_mlp", "inv_rms_mlp", "gate",      "up",
        "act"};
    for (size_t i = 0; i < std::size(pairs); ++i) {
      const std::vector<float> got = pairs[i].first->download(model.stream());
      const Tensor& want = *pairs[i].second;
      ASSERT_EQ(int64_t(got.size()), want.numel()) << "layer " << l << " " << names[i];
      const int64_t rows = want.dim(0), cols = want.numel() / want.dim(0);
      EXPECT_TRUE(rows_close(got.data(), want.data(), rows, cols, 1e-4f,
                             "layer " + std::to_string(l) + " " + names[i]));
    }
  }
  const std::vector<float> x_final = st.x_final.download(model.stream());
  EXPECT_TRUE(rows_close(x_final.data(), cs.x_final.data(), 10, c.dim, 1e-4f, "x_final"));
  const std::vector<float> x_last = st.x_last.download(model.stream());
  EXPECT_TRUE(rows_close(x_last.data(), cs.x_last.data(), 10, c.dim, 1e-4f, "x_last"));

  // unembed in row chunks equals the all-token logits.
  DeviceTensor chunk;
  model.unembed(st, nullptr, 3, 8, chunk);
  const std::vector<float> got = chunk.download(model.stream());
  EXPECT_TRUE(rows_close(got.data(), cs.logits.row(3), 5, c.vocab_size, 1e-4f, "unembed [3, 8)"));
  EXPECT_THROW(model.unembed(st, nullptr, 4, 11, chunk), Error);
}

// Invalid batches are rejected before the cache changes, with the CPU engine's messages.
TEST(GpuModel, ValidationRejectsBeforeTouchingTheCache) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w = testing::random_weights(testing::gpu_tiny_config(Arch::llama), 2);
  const engine::ModelConfig& c = w.config;
  const DeviceWeights dw(w, Precision::bf16);
  DeviceModel model(dw);
  DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 2}, Precision::bf16);
  const SeqId a = cache.create(), b = cache.create();
  DeviceForwardState st;
  const std::vector<int32_t> ok = {1, 2, 3}, bad = {1, int32_t(c.vocab_size)};
  auto expect_error = [&](std::vector<BatchSequence> batch, const std::string& text) {
    try {
      model.forward(batch, cache, nullptr, st);
      ADD_FAILURE() << "no error for: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_THAT(e.what(), ::testing::HasSubstr(text));
    }
    EXPECT_EQ(cache.length(a), 0);
    EXPECT_EQ(cache.length(b), 0);
    EXPECT_EQ(cache.free_blocks(), cache.n_blocks());
  };
  expect_error({{a, ok, -1}, {b, bad, -1}}, "outside vocab");
  expect_error({{a, ok, -1}, {a, ok, -1}}, "appears twice");
  expect_error({{a, ok, 0}}, "holds no adapter");
  expect_error({{a, ok, -2}}, "use -1 for base");
  expect_error({}, "empty batch");
  const std::vector<int32_t> too_long(size_t(c.max_seq_len + 1), 1);
  expect_error({{a, too_long, -1}}, "context");

  DeviceKvCache fp32_cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 1}, Precision::fp32);
  const SeqId s = fp32_cache.create();
  const BatchSequence one{s, ok, -1};
  EXPECT_THROW(model.forward({&one, 1}, fp32_cache, nullptr, st), Error);
  EXPECT_EQ(fp32_cache.length(s), 0);

  // A head_dim the CUDA attention does not take is refused up front.
  engine::ModelConfig odd = testing::tiny_config(Arch::qwen3);  // head_dim 12
  const engine::ModelWeights ow = testing::random_weights(odd, 4);
  const DeviceWeights odw(ow, Precision::fp32);
  EXPECT_THROW({ DeviceModel m(odw); }, Error);
}

}  // namespace
}  // namespace spindle::engine_cuda
