// HF directory loader: save -> load round trips, sharded checkpoints, and every refusal.

#include <nlohmann/json.hpp>

#include "loader_test_util.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/safetensors.h"

namespace spindle::loader_test {
namespace {

using engine::ModelWeights;
using engine::SafetensorsTensorIn;

std::vector<SafetensorsTensorIn> tensors_of(const ModelWeights& w, DType dtype = DType::f32) {
  std::vector<SafetensorsTensorIn> out;
  engine::for_each_hf_tensor(w, [&](const std::string& name, const Tensor& t) {
    out.push_back({name, dtype, t.shape(), t.data()});
  });
  return out;
}

void write_dir(const fs::path& dir, const engine::ModelConfig& c,
               const std::vector<SafetensorsTensorIn>& tensors) {
  write_file_atomic(dir / "config.json", engine::hf_config_json(c));
  engine::write_safetensors(dir / "model.safetensors", tensors);
}

void erase_tensor(std::vector<SafetensorsTensorIn>& ts, const std::string& name) {
  std::erase_if(ts, [&](const auto& t) { return t.name == name; });
}

class HfLoader : public ::testing::TestWithParam<engine::Arch> {
 protected:
  engine::ModelConfig config() const {
    switch (GetParam()) {
      case engine::Arch::llama:
        return tiny_llama();
      case engine::Arch::qwen3:
        return tiny_qwen3();
      case engine::Arch::qwen3_moe:
        return tiny_qwen3_moe();
      case engine::Arch::deepseek_v3:
        return tiny_deepseek_v3();
    }
    return {};
  }
};

TEST_P(HfLoader, RoundTripIsBitExactInF32AndRoundedInF16Bf16) {
  const ModelWeights w = random_model(config(), 7);
  TempDir dir("hf");
  engine::save_hf_dir(w, dir / "f32");
  const ModelWeights got = engine::load_model(dir / "f32");
  expect_same_weights(w, got);
  EXPECT_EQ(got.config.name, (dir / "f32").string());
  EXPECT_EQ(got.config.arch, w.config.arch);
  EXPECT_EQ(got.config.head_dim, w.config.head_dim);
  EXPECT_EQ(got.config.tie_embeddings, w.config.tie_embeddings);
  EXPECT_EQ(got.config.moe.n_experts, w.config.moe.n_experts);
  EXPECT_EQ(got.config.moe.top_k, w.config.moe.top_k);
  EXPECT_EQ(got.config.moe.expert_dim, w.config.moe.expert_dim);
  EXPECT_EQ(got.config.moe.dense_layers, w.config.moe.dense_layers);
  EXPECT_EQ(got.config.moe.norm_topk, w.config.moe.norm_topk);
  EXPECT_EQ(got.config.moe.aux_loss_coef, w.config.moe.aux_loss_coef);
  EXPECT_EQ(got.config.moe.scoring, w.config.moe.scoring);
  EXPECT_EQ(got.config.moe.n_group, w.config.moe.n_group);
  EXPECT_EQ(got.config.moe.first_dense, w.config.moe.first_dense);
  EXPECT_EQ(got.config.moe.n_shared_experts, w.config.moe.n_shared_experts);
  EXPECT_EQ(got.config.moe.routed_scaling, w.config.moe.routed_scaling);
  EXPECT_EQ(got.config.mla.q_lora_rank, w.config.mla.q_lora_rank);
  EXPECT_EQ(got.config.mla.kv_lora_rank, w.config.mla.kv_lora_rank);
  EXPECT_EQ(got.config.mla.v_head_dim, w.config.mla.v_head_dim);
  EXPECT_EQ(got.config.rope_scaling.has_value(), w.config.rope_scaling.has_value());
  if (w.config.rope_scaling) {
    EXPECT_EQ(got.config.rope_scaling->type, w.config.rope_scaling->type);
    EXPECT_EQ(got.config.rope_scaling->mscale, w.config.rope_scaling->mscale);
  }

  engine::save_hf_dir(w, dir / "f16", DType::f16);
  expect_same_weights(w, engine::load_hf_dir(dir / "f16"),
                      [](float x) { return f16_to_f32(f32_to_f16(x)); });
  engine::save_hf_dir(w, dir / "bf16", DType::bf16);
  expect_same_weights(w, engine::load_hf_dir(dir / "bf16"),
                      [](float x) { return bf16_to_f32(f32_to_bf16(x)); });
  const auto cfg = nlohmann::json::parse(read_bytes(dir / "bf16" / "config.json"));
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
  EXPECT_EQ(engine::SafetensorsFile(dir / "bf16" / "model.safetensors").metadata().at("format"),
            "pt");
  EXPECT_SPINDLE_ERROR(engine::save_hf_dir(w, dir / "i32", DType::i32), "I32");
}

TEST_P(HfLoader, ShardedCheckpointLoadsAndMissingShardIsNamed) {
  const ModelWeights w = random_model(config(), 11);
  TempDir dir("hf");
  const auto all = tensors_of(w, DType::bf16);
  write_file_atomic(dir / "config.json", engine::hf_config_json(w.config));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  std::vector<SafetensorsTensorIn> shard[3];
  for (size_t i = 0; i < all.size(); ++i) {
    shard[i % 3].push_back(all[i]);
    index["weight_map"][all[i].name] = fmt::format("model-{:05d}-of-00003.safetensors", i % 3 + 1);
  }
  for (int s = 0; s < 3; ++s) {
    engine::write_safetensors(dir / fmt::format("model-{:05d}-of-00003.safetensors", s + 1),
                              shard[s]);
  }
  write_file_atomic(dir / "model.safetensors.index.json", index.dump());
  expect_same_weights(w, engine::load_model(dir.path()),
                      [](float x) { return bf16_to_f32(f32_to_bf16(x)); });

  // weight_map must agree with the shards.
  const std::string first = all.front().name;
  index["weight_map"][first] = "model-00003-of-00003.safetensors";
  write_file_atomic(dir / "model.safetensors.index.json", index.dump());
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), "model.safetensors.index.json", first,
                       "no such tensor");
  index["weight_map"][first] = "../evil.safetensors";
  write_file_atomic(dir / "model.safetensors.index.json", index.dump());
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), "../evil.safetensors");
  index["weight_map"][first] = "model-00001-of-00003.safetensors";
  write_file_atomic(dir / "model.safetensors.index.json", index.dump());
  fs::remove(dir / "model-00002-of-00003.safetensors");
  const auto caught = catch_error([&] { engine::load_hf_dir(dir.path()); });
  EXPECT_EQ(caught.code, ErrorCode::not_found);
  EXPECT_TRUE(caught.has("model-00002-of-00003.safetensors") && caught.has("missing"))
      << caught.message;
  write_file_atomic(dir / "model.safetensors.index.json", "{\"weight_map\": 3}");
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), "weight_map");
}

TEST_P(HfLoader, TensorProblemsAreNamedWithGotAndExpected) {
  const ModelWeights w = random_model(config(), 3);
  const auto& c = w.config;
  TempDir dir("hf");
  // The query projection (MLA: the latent's up-projection).
  const std::string q = c.mla_attention() ? "model.layers.1.self_attn.q_b_proj.weight"
                                          : "model.layers.1.self_attn.q_proj.weight";
  const int64_t q_in = c.mla_attention() ? c.mla.q_lora_rank : c.dim;

  auto ts = tensors_of(w);
  for (auto& t : ts)
    if (t.name == q) t.dtype = DType::i32;
  std::vector<float> ints(size_t(c.q_dim() * q_in), 3.0f);
  for (auto& t : ts)
    if (t.name == q) t.data = ints.data();
  write_dir(dir.path(), c, ts);
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), "model.safetensors", q, "I32");

  ts = tensors_of(w);
  for (auto& t : ts)
    if (t.name == q) t.shape = {c.q_dim(), q_in / 2};
  write_dir(dir.path(), c, ts);
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), q, shape_str({c.q_dim(), q_in / 2}),
                       shape_str({c.q_dim(), q_in}), "wrong base model");

  ts = tensors_of(w);
  const std::string up = c.sparse_layer(0) ? "model.layers.0.mlp.experts.3.up_proj.weight"
                                           : "model.layers.0.mlp.up_proj.weight";
  if (c.sparse_layer(1) && c.moe.correction_bias) {
    // DeepSeek: a sparse layer's shared expert and the router's correction bias are named too.
    for (const std::string name : {"model.layers.1.mlp.shared_experts.down_proj.weight",
                                   "model.layers.1.mlp.gate.e_score_correction_bias",
                                   "model.layers.1.self_attn.kv_a_layernorm.weight"}) {
      ts = tensors_of(w);
      erase_tensor(ts, name);
      write_dir(dir.path(), c, ts);
      EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), name, "not found");
    }
    ts = tensors_of(w);
  }
  erase_tensor(ts, up);
  write_dir(dir.path(), c, ts);
  auto missing = catch_error([&] { engine::load_hf_dir(dir.path()); });
  EXPECT_EQ(missing.code, ErrorCode::not_found);
  EXPECT_TRUE(missing.has(up) && missing.has("not found") && missing.has("wrong base model"))
      << missing.message;
  if (c.sparse_layer(0)) {
    // An expert of the wrong size names the tensor and the config's moe_intermediate_size.
    ts = tensors_of(w);
    const std::string down = "model.layers.0.mlp.experts.1.down_proj.weight";
    for (auto& t : ts)
      if (t.name == down) t.shape = {c.dim, c.moe.expert_dim - 2};
    write_dir(dir.path(), c, ts);
    EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), down,
                         shape_str({c.dim, c.moe.expert_dim}), "experts 4");
  }

  ts = tensors_of(w);
  std::vector<float> extra(64, 0.5f);
  for (int i = 0; i < 7; ++i) {
    ts.push_back(
        {fmt::format("model.layers.0.self_attn.extra{}.bias", i), DType::f32, {8}, extra.data()});
  }
  ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::f32, {2}, extra.data()});
  write_dir(dir.path(), c, ts);
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), "7 unexpected", "extra0.bias",
                       "extra4.bias", "2 more", "wrong base model or architecture");

  // rotary_emb.inv_freq alone is ignored.
  ts = tensors_of(w);
  ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::f32, {2}, extra.data()});
  write_dir(dir.path(), c, ts);
  expect_same_weights(w, engine::load_hf_dir(dir.path()));
}

INSTANTIATE_TEST_SUITE_P(Arch, HfLoader,
                         ::testing::Values(engine::Arch::llama, engine::Arch::qwen3,
                                           engine::Arch::qwen3_moe, engine::Arch::deepseek_v3),
                         [](const auto& info) {
                           return std::string(engine::arch_name(info.param));
                         });

// DeepSeek-V3 checkpoints hold the multi-token-prediction module as one more layer
// (model.layers.61.* for 61 layers): skipped when num_nextn_predict_layers says so, refused as
// unexpected when it does not.
TEST(HfLoaderMtp, MultiTokenPredictionLayersAreSkipped) {
  engine::ModelConfig c = tiny_deepseek_v3();
  const ModelWeights w = random_model(c, 9);
  TempDir dir("hf");
  auto ts = tensors_of(w);
  std::vector<float> extra(size_t(c.dim * c.dim), 0.25f);
  const std::string mtp = fmt::format("model.layers.{}.", c.n_layers);
  ts.push_back({mtp + "eh_proj.weight", DType::f32, {c.dim, c.dim}, extra.data()});
  ts.push_back({mtp + "enorm.weight", DType::f32, {c.dim}, extra.data()});
  c.mtp_layers = 1;
  write_dir(dir.path(), c, ts);
  // The writer says 0 (it never saves them): set the field as DeepSeek's config.json has it.
  auto cfg = nlohmann::json::parse(read_bytes(dir / "config.json"));
  cfg["num_nextn_predict_layers"] = 1;
  write_file_atomic(dir / "config.json", cfg.dump());
  const ModelWeights got = engine::load_hf_dir(dir.path());
  expect_same_weights(w, got);
  EXPECT_EQ(got.config.mtp_layers, 1);
  cfg["num_nextn_predict_layers"] = 0;
  write_file_atomic(dir / "config.json", cfg.dump());
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), "2 unexpected", mtp + "eh_proj.weight");
}

TEST(HfLoaderTies, StrayLmHeadIgnoredWhenTiedRequiredWhenUntied) {
  TempDir dir("hf");
  const ModelWeights tied = random_model(tiny_llama(), 5);
  auto ts = tensors_of(tied);
  ts.push_back({"lm_head.weight", DType::f32, tied.tok_emb.shape(), tied.tok_emb.data()});
  write_dir(dir.path(), tied.config, ts);
  const ModelWeights got = engine::load_hf_dir(dir.path());
  EXPECT_TRUE(got.lm_head.empty());
  expect_same_weights(tied, got);

  engine::ModelConfig untied = tied.config;
  untied.tie_embeddings = false;
  write_dir(dir.path(), untied, tensors_of(tied));
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), "'lm_head.weight'", "tie_word_embeddings");
}

TEST(HfLoaderArch, Qwen3WeightsUnderALlamaConfigAreCalledOut) {
  TempDir dir("hf");
  const ModelWeights w = random_model(tiny_qwen3(), 5);
  engine::ModelConfig as_llama = w.config;
  as_llama.arch = engine::Arch::llama;
  write_dir(dir.path(), as_llama, tensors_of(w));
  EXPECT_SPINDLE_ERROR(engine::load_hf_dir(dir.path()), "q_norm.weight", "qwen3");
}

TEST(HfLoaderFiles, BadConfigAndMissingFilesAreNamed) {
  TempDir dir("hf");
  const ModelWeights w = random_model(tiny_llama(), 5);
  engine::save_hf_dir(w, dir.path());
  const std::string config = read_bytes(dir / "config.json");

  auto edit = [&](const std::string& from, const std::string& to) {
    std::string s = config;
    const auto at = s.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    write_bytes(dir / "config.json", s);
  };
  edit("\"model_type\": \"llama\"", "\"model_type\": \"falcon\"");
  auto unsupported = catch_error([&] { engine::load_model(dir.path()); });
  EXPECT_EQ(unsupported.code, ErrorCode::unsupported);
  EXPECT_TRUE(unsupported.has("config.json") && unsupported.has("'falcon'")) << unsupported.message;
  edit("\"attention_bias\": false", "\"attention_bias\": true");
  EXPECT_SPINDLE_ERROR(engine::load_model(dir.path()), "config.json", "attention_bias");
  edit("\"hidden_size\": 16", "\"hidden_size\": 32");
  EXPECT_SPINDLE_ERROR(engine::load_model(dir.path()), "model.embed_tokens.weight", "[32, 16]",
                       "expected [32, 32]");
  write_bytes(dir / "config.json", config);

  const std::string model = read_bytes(dir / "model.safetensors");
  std::string corrupt = model;
  corrupt[9] = '!';  // inside the JSON
  write_bytes(dir / "model.safetensors", corrupt);
  EXPECT_SPINDLE_ERROR(engine::load_model(dir.path()), "model.safetensors", "JSON");
  for (size_t k = 0; k < model.size(); k += (k < 600 ? 1 : 97)) {
    write_bytes(dir / "model.safetensors", model.substr(0, k));
    const auto caught = catch_error([&] { engine::load_model(dir.path()); });
    ASSERT_TRUE(caught.thrown) << k;
    EXPECT_TRUE(caught.has("model.safetensors")) << k << ": " << caught.message;
  }
  fs::remove(dir / "model.safetensors");
  EXPECT_SPINDLE_ERROR(engine::load_model(dir.path()), "model.safetensors.index.json");
  fs::remove(dir / "config.json");
  EXPECT_SPINDLE_ERROR(engine::load_model(dir.path()), "config.json is missing");

  auto nothing = catch_error([&] { engine::load_model(dir / "no-such-model"); });
  EXPECT_EQ(nothing.code, ErrorCode::not_found);
  EXPECT_TRUE(nothing.has("no-such-model")) << nothing.message;
  engine::save_hf_dir(w, dir.path());
  EXPECT_SPINDLE_ERROR(engine::load_model(dir / "model.safetensors"), "directory");
}

}  // namespace
}  // namespace spindle::loader_test
