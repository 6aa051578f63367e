// Packed MoE LoRA: packed <-> per-expert PEFT is bit-exact both ways, files round trip, and
// shape errors name the tensor.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "spindle/adapters/moe_packed.h"
#include "spindle/core/error.h"

namespace spindle::adapters {
namespace {

const MoeDims kDims{/*n_layers=*/2, /*n_experts=*/4, /*hidden=*/16, /*moe_intermediate=*/8};

std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("spindle_moe_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
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

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

void expect_equal(const PackedMoeLora& a, const PackedMoeLora& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.alpha, b.alpha);
  EXPECT_EQ(a.use_rslora, b.use_rslora);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (int p = 0; p < kMoeProjCount; ++p) {
      EXPECT_TRUE(bit_equal(a.layers[l][p].A, b.layers[l][p].A)) << l << " " << p;
      EXPECT_TRUE(bit_equal(a.layers[l][p].B, b.layers[l][p].B)) << l << " " << p;
    }
  }
}

TEST(MoePacked, ShapesAndNames) {
  const auto p = PackedMoeLora::random(kDims, 3, 6.0f, 1, 0.1f, 0.1f);
  EXPECT_EQ(p.layers[0][int(MoeProj::gate)].A.shape(), (Shape{4, 3, 16}));
  EXPECT_EQ(p.layers[0][int(MoeProj::gate)].B.shape(), (Shape{4, 8, 3}));
  EXPECT_EQ(p.layers[1][int(MoeProj::down)].A.shape(), (Shape{4, 3, 8}));
  EXPECT_EQ(p.layers[1][int(MoeProj::down)].B.shape(), (Shape{4, 16, 3}));
  EXPECT_EQ(moe_expert_tensor_name(3, 7, MoeProj::up, LoraMatrix::B),
            "base_model.model.model.layers.3.mlp.experts.7.up_proj.lora_B.weight");
}

TEST(MoePacked, PeftRoundTripIsBitExact) {
  const auto p = PackedMoeLora::random(kDims, 3, 6.0f, 2, 0.3f, 0.2f);
  const PeftTensorMap peft = unpack_moe_to_peft(p);
  EXPECT_EQ(peft.size(), size_t(2 * 4 * 3 * 2));
  // Expert 2's gate A is rows [6, 9) of the packed [E·r, d_in] view.
  const Tensor& a2 = peft.at(moe_expert_tensor_name(1, 2, MoeProj::gate, LoraMatrix::A));
  EXPECT_EQ(a2.shape(), (Shape{3, 16}));
  EXPECT_EQ(std::memcmp(a2.data(), p.layers[1][0].A.data() + 2 * 3 * 16, a2.bytes()), 0);
  const auto back = pack_moe_from_peft(peft, kDims, {3, 6.0f, false}, "test");
  expect_equal(p, back);
}

TEST(MoePacked, FilesRoundTripBothLayouts) {
  const auto dir = temp_dir("files");
  auto p = PackedMoeLora::random(kDims, 2, 4.0f, 3, 0.3f, 0.2f);
  p.use_rslora = true;
  save_packed_moe(p, dir / "packed.safetensors");
  save_per_expert_moe(p, dir / "experts.safetensors");
  expect_equal(p, load_packed_moe(dir / "packed.safetensors", kDims));
  expect_equal(p, load_per_expert_moe(dir / "experts.safetensors", kDims));
  // The layouts are tagged; loading one as the other is refused.
  EXPECT_NE(error_of([&] { load_packed_moe(dir / "experts.safetensors", kDims); })
                .find("layout is 'per_expert', expected 'packed'"),
            std::string::npos);
  MoeDims other = kDims;
  other.n_experts = 8;
  EXPECT_NE(error_of([&] { load_packed_moe(dir / "packed.safetensors", other); })
                .find("4 experts, base has 8"),
            std::string::npos);
  MoeDims wider = kDims;
  wider.hidden = 32;
  EXPECT_NE(error_of([&] { load_packed_moe(dir / "packed.safetensors", wider); })
                .find("'base_model.model.model.layers.0.mlp.experts.gate_proj.lora_A.packed' "
                      "has shape [4, 2, 16], expected [4, 2, 32]"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(MoePacked, PackErrorsNameTheTensor) {
  const auto p = PackedMoeLora::random(kDims, 3, 6.0f, 4, 0.3f, 0.2f);
  PeftTensorMap peft = unpack_moe_to_peft(p);
  const std::string b = moe_expert_tensor_name(1, 3, MoeProj::down, LoraMatrix::B);
  peft[b] = Tensor::zeros({16, 4});
  const std::string err = error_of([&] { pack_moe_from_peft(peft, kDims, {3, 6.0f, false}, "x"); });
  EXPECT_NE(err.find("'" + b + "' has shape [16, 4], expected [16, 3]"), std::string::npos) << err;
  peft.erase(b);
  EXPECT_NE(error_of([&] { pack_moe_from_peft(peft, kDims, {3, 6.0f, false}, "x"); })
                .find("'" + b + "' is missing"),
            std::string::npos);
}

}  // namespace
}  // namespace spindle::adapters
