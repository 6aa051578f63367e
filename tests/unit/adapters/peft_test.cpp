// PEFT adapter directories: save -> load is bit-exact; bad files get errors naming the module.

#include <gtest/gtest.h>

#include <fstream>

#include "../model/model_fixtures.h"
#include "spindle/adapters/peft.h"
#include "spindle/core/error.h"
#include "spindle/engine/safetensors.h"

namespace spindle::adapters {
namespace {

using engine::LoraTarget;

std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("spindle_peft_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

const engine::ModelConfig kConfig = testing::tiny_config(engine::Arch::qwen3);

TEST(Peft, SaveLoadRoundTripIsBitExact) {
  const LoraTarget targets[] = {LoraTarget::q, LoraTarget::k, LoraTarget::v, LoraTarget::o,
                                LoraTarget::gate, LoraTarget::up, LoraTarget::down,
                                LoraTarget::lm_head};
  auto a = engine::LoraWeights::random(kConfig, 6, 12.0f, targets, 3, 0.2f, 0.2f);
  a.use_rslora = true;
  const auto dir = temp_dir("roundtrip");
  save_peft(a, dir, {.base_model_name_or_path = "tiny-qwen3"});
  const auto cfg = parse_peft_config(read_file_to_string(dir / "adapter_config.json"), "cfg");
  EXPECT_EQ(cfg.r, 6);
  EXPECT_TRUE(cfg.use_rslora);
  EXPECT_EQ(cfg.base_model_name_or_path, "tiny-qwen3");
  EXPECT_EQ(cfg.target_modules.size(), 8u);
  const auto b = load_peft(dir, kConfig);
  EXPECT_EQ(b.rank, 6);
  EXPECT_EQ(b.alpha, 12.0f);
  EXPECT_FLOAT_EQ(b.scale(), 12.0f / std::sqrt(6.0f));
  for (size_t l = 0; l < a.modules.size(); ++l) {
    for (LoraTarget t : engine::kAllLoraTargets) {
      const auto& pa = a.modules[l][size_t(t)];
      const auto& pb = b.modules[l][size_t(t)];
      ASSERT_EQ(pa.empty(), pb.empty());
      if (pa.empty()) continue;
      ASSERT_EQ(pa.A.shape(), pb.A.shape());
      EXPECT_EQ(0, std::memcmp(pa.A.data(), pb.A.data(), pa.A.bytes()));
      EXPECT_EQ(0, std::memcmp(pa.B.data(), pb.B.data(), pa.B.bytes()));
    }
  }
  // Keys follow PEFT's naming.
  const engine::SafetensorsFile f(dir / "adapter_model.safetensors");
  EXPECT_NE(f.find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"), nullptr);
  EXPECT_NE(f.find("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"), nullptr);
  EXPECT_NE(f.find("base_model.model.lm_head.lora_B.weight"), nullptr);
  std::filesystem::remove_all(dir);
}

// Qwen3-MoE adapters in PEFT's own layout: one pair per routed expert
// (layers.L.mlp.experts.E.up_proj.lora_A.weight), packed again on load, bit for bit.
TEST(Peft, RoutedExpertsUsePeftPerExpertNames) {
  const engine::ModelConfig c = testing::tiny_config(engine::Arch::qwen3_moe);
  const LoraTarget targets[] = {LoraTarget::q, LoraTarget::gate, LoraTarget::up, LoraTarget::down};
  const auto a = engine::LoraWeights::random(c, 3, 6.0f, targets, 4, 0.2f, 0.2f);
  const auto dir = temp_dir("moe");
  save_peft(a, dir, {.base_model_name_or_path = "tiny-moe"});
  const engine::SafetensorsFile f(dir / "adapter_model.safetensors");
  const auto* e7 = f.find("base_model.model.model.layers.2.mlp.experts.7.down_proj.lora_B.weight");
  ASSERT_NE(e7, nullptr);
  EXPECT_EQ(e7->shape, (Shape{c.dim, 3}));
  EXPECT_NE(f.find("base_model.model.model.layers.1.mlp.gate_proj.lora_A.weight"), nullptr);
  EXPECT_EQ(f.find("base_model.model.model.layers.0.mlp.gate_proj.lora_A.weight"), nullptr);
  const auto b = load_peft(dir, c);
  ASSERT_TRUE(b.has_experts());
  for (size_t l = 0; l < a.experts.size(); ++l) {
    for (int p = 0; p < engine::kExpertProjCount; ++p) {
      const auto& x = a.experts[l][size_t(p)];
      const auto& y = b.experts[l][size_t(p)];
      ASSERT_EQ(x.A.shape(), y.A.shape()) << l << " " << p;
      if (x.empty()) continue;
      EXPECT_EQ(0, std::memcmp(x.A.data(), y.A.data(), x.A.bytes()));
      EXPECT_EQ(0, std::memcmp(x.B.data(), y.B.data(), x.B.bytes()));
    }
  }
  // A missing expert is named, with how many its layer adapts.
  std::vector<engine::SafetensorsTensorIn> ts;
  for (const auto& e : f.entries()) {
    if (e.name.find("layers.0.mlp.experts.5.up_proj.lora_A") != std::string::npos) continue;
    ts.push_back({e.name, DType::f32, e.shape, nullptr});
  }
  std::vector<Tensor> keep;
  for (auto& t : ts) {
    keep.push_back(f.read_f32(*f.find(t.name)));
    t.data = keep.back().data();
  }
  engine::write_safetensors(dir / "adapter_model.safetensors", ts, {{"format", "pt"}});
  const std::string err = error_of([&] { load_peft(dir, c); });
  EXPECT_NE(err.find("layers.0.mlp.experts.5.up_proj"), std::string::npos) << err;
  EXPECT_NE(err.find("8 experts"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
}

// DeepSeek-V3: MLA's modules under self_attn, a sparse layer's MLP LoRA as its shared experts
// (mlp.shared_experts.up_proj, the module PEFT adapts there) next to the routed experts; read
// back bit for bit, and the dense names Spindle writes without a base read back the same.
TEST(Peft, DeepseekSharedExpertsAndMlaModulesUsePeftNames) {
  const engine::ModelConfig c = testing::tiny_config(engine::Arch::deepseek_v3);
  const LoraTarget targets[] = {LoraTarget::q_a,  LoraTarget::q_b, LoraTarget::kv_a,
                                LoraTarget::kv_b, LoraTarget::o,   LoraTarget::gate,
                                LoraTarget::up,   LoraTarget::down};
  const auto a = engine::LoraWeights::random(c, 2, 4.0f, targets, 6, 0.2f, 0.2f);
  for (const engine::ModelConfig* base : {&c, static_cast<const engine::ModelConfig*>(nullptr)}) {
    const auto dir = temp_dir("deepseek");
    save_peft(a, dir, {.base_model_name_or_path = "tiny-deepseek", .base = base});
    const engine::SafetensorsFile f(dir / "adapter_model.safetensors");
    EXPECT_NE(f.find("base_model.model.model.layers.1.self_attn.kv_a_proj_with_mqa.lora_A.weight"),
              nullptr);
    EXPECT_NE(f.find("base_model.model.model.layers.2.self_attn.q_b_proj.lora_B.weight"), nullptr);
    EXPECT_NE(f.find("base_model.model.model.layers.0.mlp.gate_proj.lora_A.weight"), nullptr);
    EXPECT_NE(f.find("base_model.model.model.layers.1.mlp.experts.7.up_proj.lora_A.weight"),
              nullptr);
    const std::string shared =
        "base_model.model.model.layers.1.mlp.shared_experts.up_proj.lora_A.weight";
    const std::string dense = "base_model.model.model.layers.1.mlp.up_proj.lora_A.weight";
    EXPECT_EQ(f.find(shared) != nullptr, base != nullptr);
    EXPECT_EQ(f.find(dense) != nullptr, base == nullptr);
    EXPECT_EQ(testing::max_abs_diff(a, load_peft(dir, c)), 0.0f);
    std::filesystem::remove_all(dir);
  }
}

TEST(Peft, AdapterForAnotherBaseIsRefusedNamingTheModule) {
  const LoraTarget q[] = {LoraTarget::q, LoraTarget::up};
  const auto a = engine::LoraWeights::random(kConfig, 4, 8.0f, q, 1, 0.1f, 0.1f);
  const auto dir = temp_dir("wrongbase");
  save_peft(a, dir);
  engine::ModelConfig other = kConfig;
  other.hidden_dim = 96;
  const std::string msg = error_of([&] { load_peft(dir, other); });
  EXPECT_NE(msg.find("layers.0.up_proj"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wrong base model"), std::string::npos) << msg;
  other = kConfig;
  other.n_layers = 1;
  EXPECT_NE(error_of([&] { load_peft(dir, other); }).find("layer 1"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Peft, UnsupportedAndMalformedConfigs) {
  auto cfg = [](const std::string& extra) {
    return R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"])" + extra + "}";
  };
  EXPECT_NE(error_of([&] { parse_peft_config(cfg(R"(, "use_dora": true)"), "c"); }).find("use_dora"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_peft_config(cfg(R"(, "rank_pattern": {"q_proj": 8})"), "c"); })
                .find("rank_pattern"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_peft_config(R"({"r": 4, "lora_alpha": 8, "target_modules": ["c_attn"]})", "c"); })
                .find("c_attn"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_peft_config(R"({"lora_alpha": 8})", "c"); }).find("'r'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_peft_config("{not json", "c"); }).find("JSON"), std::string::npos);
  const auto all = parse_peft_config(R"({"r": 4, "lora_alpha": 8, "target_modules": "all-linear"})", "c");
  EXPECT_EQ(all.target_modules.size(), 11u);  // every linear but lm_head, MLA's four included
  const auto re = parse_peft_config(
      R"x({"r": 4, "lora_alpha": 8, "target_modules": ".*\\.(q_proj|v_proj)"})x", "c");
  EXPECT_EQ(re.target_modules, (std::vector<LoraTarget>{LoraTarget::q, LoraTarget::v}));
}

TEST(Peft, MissingHalfOfAPairIsAnError) {
  const auto dir = temp_dir("half");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "adapter_config.json")
      << R"({"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]})";
  Tensor A = Tensor::zeros({2, kConfig.dim});
  const engine::SafetensorsTensorIn t[] = {
      {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", DType::f32, A.shape(),
       A.data()}};
  engine::write_safetensors(dir / "adapter_model.safetensors", t);
  const std::string msg = error_of([&] { load_peft(dir, kConfig); });
  EXPECT_NE(msg.find("lora_A but no lora_B"), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace spindle::adapters
