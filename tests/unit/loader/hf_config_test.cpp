// HF config.json parsing: real Llama 3.2 / Qwen3 configs, defaults, refusals, round trip.

#include "loader_test_util.h"
#include "spindle/engine/loader.h"

namespace spindle::loader_test {
namespace {

using engine::Arch;
using engine::ModelConfig;
using engine::parse_hf_config;
using engine::RopeScalingType;
using engine::RouterScoring;

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
    EXPECT_EQ(a.rope_scaling->type, b.rope_scaling->type);
    EXPECT_EQ(a.rope_scaling->beta_fast, b.rope_scaling->beta_fast);
    EXPECT_EQ(a.rope_scaling->beta_slow, b.rope_scaling->beta_slow);
    EXPECT_EQ(a.rope_scaling->mscale, b.rope_scaling->mscale);
    EXPECT_EQ(a.rope_scaling->mscale_all_dim, b.rope_scaling->mscale_all_dim);
    EXPECT_EQ(a.rope_scaling->attention_factor, b.rope_scaling->attention_factor);
    EXPECT_EQ(a.rope_scaling->truncate, b.rope_scaling->truncate);
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

// DeepSeek-V3's config.json (HF hub deepseek-ai/DeepSeek-V3, its bf16 form: the fp8 release
// carries quantization_config, refused below).
constexpr const char* kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "attention_bias": false, "attention_dropout": 0.0, "aux_loss_alpha": 0.001,
  "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
  "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02,
  "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
  "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "seq_aux": true, "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280})";

TEST(HfConfig, ParsesDeepseekV3) {
  const ModelConfig c = parse_hf_config(kDeepseekV3, "deepseek-v3/config.json");
  EXPECT_EQ(c.arch, Arch::deepseek_v3);
  EXPECT_TRUE(c.mla_attention());
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.head_dim, 192);  // qk_nope + qk_rope
  EXPECT_EQ(c.n_kv_heads, 128);
  EXPECT_EQ(c.attn_out_dim(), 128 * 128);
  EXPECT_EQ(c.rope_dim(), 64);
  EXPECT_TRUE(c.mla.rope_interleave);  // transformers' default
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, RopeScalingType::yarn);
  EXPECT_FLOAT_EQ(c.rope_scaling->factor, 40.0f);
  EXPECT_EQ(c.rope_scaling->original_max_position, 4096);
  EXPECT_FLOAT_EQ(c.rope_scaling->mscale_all_dim, 1.0f);
  EXPECT_EQ(c.moe.n_experts, 256);
  EXPECT_EQ(c.moe.top_k, 8);
  EXPECT_EQ(c.moe.expert_dim, 2048);
  EXPECT_EQ(c.moe.scoring, RouterScoring::sigmoid);
  EXPECT_TRUE(c.moe.correction_bias);
  EXPECT_EQ(c.moe.n_group, 8);
  EXPECT_EQ(c.moe.topk_group, 4);
  EXPECT_FLOAT_EQ(c.moe.routed_scaling, 2.5f);
  EXPECT_EQ(c.moe.n_shared_experts, 1);
  EXPECT_EQ(c.dense_mlp_dim(0), 18432);  // first_k_dense_replace 3: layers 0-2 dense
  EXPECT_FALSE(c.sparse_layer(2));
  EXPECT_TRUE(c.sparse_layer(3));
  EXPECT_EQ(c.dense_mlp_dim(3), 2048);  // the shared expert
  EXPECT_FALSE(c.moe.router_aux_loss);
  EXPECT_EQ(c.mtp_layers, 1);  // num_nextn_predict_layers: layer 61's tensors are skipped
  // The latent cache: 61 layers × (512 + 64) per token, against 2 × 128 heads × 192 for
  // the same model with full multi-head K and V (the GQA-shaped cache it replaces).
  EXPECT_EQ(c.kv_bytes_per_token(2), 61 * 576 * 2);
  // The writer's JSON reads back the same model.
  const ModelConfig back = parse_hf_config(hf_config_json(c), "back.json");
  EXPECT_EQ(back.arch, Arch::deepseek_v3);
  EXPECT_EQ(back.mla.q_lora_rank, 1536);
  EXPECT_EQ(back.mla.v_head_dim, 128);
  EXPECT_EQ(back.moe.first_dense, 3);
  EXPECT_EQ(back.moe.n_group, 8);
  EXPECT_FLOAT_EQ(back.moe.routed_scaling, 2.5f);
  ASSERT_TRUE(back.rope_scaling.has_value());
  EXPECT_EQ(back.rope_scaling->type, RopeScalingType::yarn);
  EXPECT_FLOAT_EQ(back.rope_scaling->factor, 40.0f);
  EXPECT_FLOAT_EQ(back.rope_scaling->mscale, 1.0f);
  // Kimi-K2 is the same architecture (model_type kimi_k2 in its config), and DeepSeek-V2-Lite's
  // q_lora_rank null means q_proj.
  std::string kimi = kDeepseekV3;
  kimi.replace(kimi.find("\"deepseek_v3\""), 13, "\"kimi_k2\"");
  kimi.replace(kimi.find("\"q_lora_rank\": 1536"), 19, "\"q_lora_rank\": null");
  const ModelConfig k = parse_hf_config(kimi, "kimi/config.json");
  EXPECT_EQ(k.arch, Arch::deepseek_v3);
  EXPECT_EQ(k.mla.q_lora_rank, 0);
}

TEST(HfConfig, RefusesWhatDeepseekV3CannotRunAs) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string s = kDeepseekV3;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const struct {
    std::string json;
    ErrorCode code;
    std::vector<std::string> needles;
  } cases[] = {
      {with("\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\""),
       ErrorCode::unsupported,
       {"scoring_func", "softmax"}},
      {with("\"topk_method\": \"noaux_tc\"", "\"topk_method\": \"greedy\""),
       ErrorCode::unsupported,
       {"topk_method", "greedy"}},
      {with("\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2"),
       ErrorCode::unsupported,
       {"moe_layer_freq"}},
      {with("\"n_group\": 8", "\"n_group\": 3"), ErrorCode::invalid_argument, {"n_group", "3"}},
      {with("\"topk_group\": 4", "\"topk_group\": 9"),
       ErrorCode::invalid_argument,
       {"topk_group", "9"}},
      {with("\"qk_rope_head_dim\": 64", "\"qk_rope_head_dim\": 63"),
       ErrorCode::invalid_argument,
       {"qk_rope_head_dim"}},
      {with("\"use_cache\": true", "\"quantization_config\": {\"quant_method\": \"fp8\"}"),
       ErrorCode::unsupported,
       {"quantization_config", "fp8"}},
  };
  for (const auto& k : cases) {
    try {
      parse_hf_config(k.json, "ds.json");
      ADD_FAILURE() << "accepted: " << k.needles[0];
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), k.code) << e.what();
      for (const auto& n : k.needles) {
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
      }
    }
  }
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
  odd.rope_scaling = engine::RopeScaling{.factor = 8.5f,
                                         .low_freq_factor = 0.75f,
                                         .high_freq_factor = 3.25f,
                                         .original_max_position = 4096};
  configs.push_back(odd);
  ModelConfig yarn = tiny_qwen3();
  yarn.rope_scaling = engine::RopeScaling{.type = RopeScalingType::yarn,
                                          .factor = 4.0f,
                                          .original_max_position = 32768,
                                          .beta_fast = 16.0f,
                                          .mscale = 0.707f,
                                          .attention_factor = 1.25f,
                                          .truncate = false};
  configs.push_back(yarn);
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
       ErrorCode::format,
       {"original_max_position_embeddings"}},
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
