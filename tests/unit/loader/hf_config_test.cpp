// HF config.json parsing: real Llama 3.2 / Qwen3 configs, defaults, refusals, round trip.

#include "loader_test_util.h"
#include "spindle/engine/loader.h"

namespace spindle::loader_test {
namespace {

using engine::Arch;
using engine::ModelConfig;
using engine::parse_hf_config;

const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// A minimal Llama 2 style config: no head_dim, no kv heads, no eps, no theta.
const std::string kMinimal = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 172,
  "num_hidden_layers": 5, "num_attention_heads": 8, "vocab_size": 512)";

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
  EXPECT_EQ(a.name, b.name);
  ASSERT_EQ(a.rope_scaling.has_value(), b.rope_scaling.has_value());
  if (a.rope_scaling) {
    EXPECT_EQ(a.rope_scaling->factor, b.rope_scaling->factor);
    EXPECT_EQ(a.rope_scaling->low_freq_factor, b.rope_scaling->low_freq_factor);
    EXPECT_EQ(a.rope_scaling->high_freq_factor, b.rope_scaling->high_freq_factor);
    EXPECT_EQ(a.rope_scaling->original_max_position, b.rope_scaling->original_max_position);
  }
}

TEST(HfConfig, ParsesLlama32) {
  const ModelConfig c = parse_hf_config(kLlama32_1B, "llama/config.json");
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.dim, 2048);
  EXPECT_EQ(c.hidden_dim, 8192);
  EXPECT_EQ(c.n_layers, 16);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.bos_id, 128000);
  EXPECT_EQ(c.eos_id, 128001);  // first of the list
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->factor, 32.0f);
  EXPECT_EQ(c.rope_scaling->original_max_position, 8192);
}

TEST(HfConfig, ParsesQwen3WithDecoupledHeadDim) {
  const ModelConfig c = parse_hf_config(kQwen3_06B, "qwen/config.json");
  EXPECT_EQ(c.arch, Arch::qwen3);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 2048);  // != hidden_size
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_EQ(c.eos_id, 151645);
}

// Qwen3-30B-A3B's config.json (the fields that matter; HF hub, 2025).
TEST(HfConfig, ParsesQwen3Moe30BA3B) {
  const ModelConfig c = parse_hf_config(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
    "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": 0.001,
    "output_router_logits": false, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": false, "hidden_act": "silu", "attention_bias": false,
    "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16"})",
                                        "qwen3-30b-a3b/config.json");
  EXPECT_EQ(c.arch, Arch::qwen3_moe);
  EXPECT_TRUE(c.qk_norm());
  EXPECT_EQ(c.moe.n_experts, 128);
  EXPECT_EQ(c.moe.top_k, 8);
  EXPECT_EQ(c.moe.expert_dim, 768);
  EXPECT_TRUE(c.moe.norm_topk);
  EXPECT_FLOAT_EQ(c.moe.aux_loss_coef, 0.001f);
  EXPECT_FALSE(c.moe.router_aux_loss);  // output_router_logits false
  for (int64_t l = 0; l < 48; ++l) EXPECT_TRUE(c.sparse_layer(l)) << l;
  // decoder_sparse_step 2 and mlp_only_layers leave the others dense, as HF decides.
  const ModelConfig d = parse_hf_config(R"({"model_type": "qwen3_moe", "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 6, "num_attention_heads": 4,
    "vocab_size": 100, "decoder_sparse_step": 2, "mlp_only_layers": [3]})",
                                        "d.json");
  EXPECT_EQ(d.moe.n_experts, 128);  // transformers' defaults
  EXPECT_EQ(d.moe.top_k, 8);
  EXPECT_EQ(d.moe.expert_dim, 768);
  EXPECT_FALSE(d.moe.norm_topk);
  const bool want[] = {false, true, false, false, false, true};
  for (int64_t l = 0; l < 6; ++l) EXPECT_EQ(d.sparse_layer(l), want[l]) << l;
  const ModelConfig back = parse_hf_config(hf_config_json(c), "back.json");
  EXPECT_EQ(back.arch, Arch::qwen3_moe);
  EXPECT_EQ(back.moe.n_experts, 128);
  EXPECT_EQ(back.moe.expert_dim, 768);
  EXPECT_TRUE(back.moe.norm_topk);
  ModelConfig with_aux = c;
  with_aux.moe.router_aux_loss = true;
  EXPECT_TRUE(parse_hf_config(hf_config_json(with_aux), "aux.json").moe.router_aux_loss);
}

TEST(HfConfig, DefaultsFollowTransformers) {
  const ModelConfig c = parse_hf_config(kMinimal + "}", "min.json");
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.max_seq_len, 2048);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  EXPECT_EQ(c.name, "min.json");
  // architectures alone identifies the model; null ids keep the defaults, clamped into a
  // tiny vocabulary; "default" rope scaling means none.
  const ModelConfig d = parse_hf_config(
      R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 8, "intermediate_size": 8,
          "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 2,
          "bos_token_id": null, "eos_token_id": [], "rope_scaling": {"rope_type": "default"},
          "_name_or_path": "Qwen/Tiny"})",
      "d.json");
  EXPECT_EQ(d.arch, Arch::qwen3);
  EXPECT_EQ(d.bos_id, 1);
  EXPECT_EQ(d.eos_id, 1);
  EXPECT_FALSE(d.rope_scaling.has_value());
  EXPECT_EQ(d.name, "Qwen/Tiny");
}

TEST(HfConfig, RoundTripsThroughJson) {
  std::vector<ModelConfig> configs = {tiny_llama(), tiny_qwen3(), parse_hf_config(kLlama32_1B, "a"),
                                      parse_hf_config(kQwen3_06B, "b")};
  ModelConfig odd = tiny_llama();
  odd.rope_theta = 12345.678f;
  odd.rms_eps = 3.3e-7f;
  odd.rope_scaling = engine::RopeScaling{8.5f, 0.75f, 3.25f, 4096};
  configs.push_back(odd);
  for (const auto& c : configs) {
    const std::string text = engine::hf_config_json(c);
    expect_same_config(c, parse_hf_config(text, "rt"));
  }
  EXPECT_NE(engine::hf_config_json(tiny_llama()).find("\"rms_norm_eps\": 1e-05"),
            std::string::npos);
}

TEST(HfConfig, RefusesUnsupportedAndMalformedConfigs) {
  const std::string base = kMinimal;
  const std::string base_moe =
      R"({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 172,
  "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 512, "num_experts": 8)";
  struct Case {
    std::string json;
    ErrorCode code;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {R"({"model_type": "mistral"})", ErrorCode::unsupported, {"'mistral'", "llama, qwen3"}},
      {R"({"model_type": "deepseek_v3"})", ErrorCode::unsupported, {"deepseek_v3", "qwen3_moe"}},
      {base_moe + R"(, "num_experts_per_tok": 9})",
       ErrorCode::invalid_argument,
       {"num_experts_per_tok", "9"}},
      {base_moe + R"(, "mlp_only_layers": [7]})",
       ErrorCode::invalid_argument,
       {"mlp_only_layers", "7"}},
      {base_moe + R"(, "mlp_only_layers": "0"})", ErrorCode::format, {"mlp_only_layers"}},
      {R"({"architectures": ["GPT2LMHeadModel"]})", ErrorCode::unsupported, {"GPT2LMHeadModel"}},
      {R"({"hidden_size": 8})", ErrorCode::format, {"model_type"}},
      {base + R"(, "attention_bias": true})", ErrorCode::unsupported, {"attention_bias"}},
      {base + R"(, "mlp_bias": true})", ErrorCode::unsupported, {"mlp_bias"}},
      {base + R"(, "hidden_act": "gelu"})", ErrorCode::unsupported, {"hidden_act", "'gelu'"}},
      {base + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
       ErrorCode::unsupported,
       {"'yarn'"}},
      {base + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})",
       ErrorCode::unsupported,
       {"'linear'"}},
      {base + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})",
       ErrorCode::format,
       {"low_freq_factor"}},
      {base + R"(, "num_key_value_heads": 3})", ErrorCode::invalid_argument, {"n_kv_heads"}},
      {base + R"(, "hidden_size": "64"})", ErrorCode::format, {"'hidden_size'", "integer"}},
      {base + R"(, "hidden_size": 64.5})", ErrorCode::format, {"'hidden_size'"}},
      {base + R"(, "num_hidden_layers": -1})", ErrorCode::invalid_argument, {"n_layers", "-1"}},
      {base + R"(, "vocab_size": 18446744073709551615})", ErrorCode::format, {"'vocab_size'"}},
      {base + R"(, "rope_theta": "big"})", ErrorCode::format, {"'rope_theta'"}},
      {base + R"(, "rms_norm_eps": 1e300})", ErrorCode::format, {"'rms_norm_eps'"}},
      {base + R"(, "tie_word_embeddings": 1})", ErrorCode::format, {"'tie_word_embeddings'"}},
      {base + R"(, "bos_token_id": -1})", ErrorCode::format, {"'bos_token_id'"}},
      {base + R"(, "eos_token_id": 512})", ErrorCode::invalid_argument, {"eos", "512"}},
      {base + R"(, "use_sliding_window": true})", ErrorCode::unsupported, {"use_sliding_window"}},
      {R"({"model_type": "llama", "intermediate_size": 8})", ErrorCode::format, {"'hidden_size'"}},
      {R"({"model_type": "llama", "hidden_size": 10, "intermediate_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 4, "vocab_size": 8})",
       ErrorCode::format,
       {"not a multiple"}},
      {"{not json", ErrorCode::format, {"not valid JSON"}},
      {"[]", ErrorCode::format, {"JSON object"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.json);
    const auto caught = catch_error([&] { parse_hf_config(c.json, "some/config.json"); });
    ASSERT_TRUE(caught.thrown);
    EXPECT_EQ(caught.code, c.code) << caught.message;
    EXPECT_TRUE(caught.has("some/config.json")) << caught.message;
    for (const auto& n : c.needles) EXPECT_TRUE(caught.has(n)) << caught.message;
  }
}

}  // namespace
}  // namespace spindle::loader_test
