// optimizer_state.safetensors beside a PEFT adapter: PEFT-keyed names, bit-exact resume, and
// errors naming the file.

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "spindle/adapters/optimizer_state.h"
#include "spindle/adapters/peft.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/safetensors.h"

namespace spindle::adapters {
namespace {

using engine::AdamParams;
using engine::AdamW;
using engine::LoraTarget;
using engine::ParamRef;

std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("spindle_optstate_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// One q_proj and one down_proj LoRA pair, named as the trainer names them.
struct TinyAdapter {
  std::vector<std::string> names = {peft_module_key(0, LoraTarget::q) + ".lora_A.weight",
                                    peft_module_key(0, LoraTarget::q) + ".lora_B.weight",
                                    peft_module_key(1, LoraTarget::down) + ".lora_A.weight",
                                    peft_module_key(1, LoraTarget::down) + ".lora_B.weight"};
  std::vector<Tensor> params;
  TinyAdapter() {
    const Shape shapes[] = {{2, 8}, {8, 2}, {2, 16}, {8, 2}};
    for (size_t k = 0; k < 4; ++k) {
      params.push_back(Tensor(shapes[k]));
      for (int64_t i = 0; i < params[k].numel(); ++i)
        params[k].data()[i] = 0.01f * float((i * 7 + int64_t(k) * 3) % 11) - 0.05f;
    }
  }
  void train(AdamW& opt, int from, int to) {
    const AdamParams hp{.learning_rate = 1e-2f, .weight_decay = 0.1f};
    for (int s = from; s < to; ++s) {
      std::vector<Tensor> grads;
      std::vector<ParamRef> refs;
      for (size_t k = 0; k < params.size(); ++k) {
        grads.push_back(Tensor(params[k].shape()));
        for (int64_t i = 0; i < params[k].numel(); ++i)
          grads[k].data()[i] = std::sin(float(s + i) + 10.0f * params[k].data()[i]);
      }
      for (size_t k = 0; k < params.size(); ++k) refs.push_back({names[k], &params[k], &grads[k]});
      opt.step(refs, hp);
    }
  }
};

TEST(OptimizerState, SavedBesideTheAdapterWithPeftKeys) {
  TinyAdapter ad;
  AdamW opt;
  ad.train(opt, 0, 2);
  const auto dir = temp_dir("keys");
  EXPECT_FALSE(has_optimizer_state(dir));
  save_optimizer_state(opt, dir);
  EXPECT_TRUE(has_optimizer_state(dir));
  EXPECT_EQ(optimizer_state_path(dir), dir / "optimizer_state.safetensors");
  const engine::SafetensorsFile st(dir / "optimizer_state.safetensors");
  EXPECT_NE(st.find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight.exp_avg"),
            nullptr);
  EXPECT_NE(st.find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight.exp_avg_sq"),
            nullptr);
  EXPECT_EQ(st.entries().size(), 8u);
  EXPECT_EQ(st.metadata().at("step"), "2");
}

TEST(OptimizerState, ResumeIsBitExact) {
  TinyAdapter straight;
  AdamW opt_straight;
  straight.train(opt_straight, 0, 4);

  TinyAdapter resumed;
  AdamW opt_first;
  resumed.train(opt_first, 0, 2);
  const auto dir = temp_dir("resume");
  save_optimizer_state(opt_first, dir);
  AdamW opt_resumed = load_optimizer_state(dir);
  EXPECT_EQ(opt_resumed.step_count(), 2);
  resumed.train(opt_resumed, 2, 4);
  EXPECT_EQ(opt_resumed.step_count(), 4);
  for (size_t k = 0; k < straight.params.size(); ++k) {
    EXPECT_TRUE(same_bits(straight.params[k], resumed.params[k])) << straight.names[k];
    const auto& a = opt_straight.moments().at(straight.names[k]);
    const auto& b = opt_resumed.moments().at(straight.names[k]);
    EXPECT_TRUE(same_bits(a.first, b.first)) << straight.names[k];
    EXPECT_TRUE(same_bits(a.second, b.second)) << straight.names[k];
  }
}

TEST(OptimizerState, MissingOrCorruptFileIsNamed) {
  const auto dir = temp_dir("errors");
  const std::string file = (dir / "optimizer_state.safetensors").string();
  try {
    load_optimizer_state(dir);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "optimizer_state.safetensors", std::string_view("\x10\0\0\0", 4));
  try {
    load_optimizer_state(dir);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  // A valid safetensors file that is not an optimizer state (e.g. the adapter itself).
  const float v[] = {1.0f};
  const engine::SafetensorsTensorIn t{"x.lora_A.weight", DType::f32, {1}, v};
  engine::write_safetensors(dir / "optimizer_state.safetensors", {&t, 1});
  try {
    load_optimizer_state(dir);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::format);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spindle::adapters
