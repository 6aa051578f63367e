// Revision files: bit-exact round trip, deterministic bytes, metadata checks, PEFT import.

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "../model/model_fixtures.h"
#include "catalog_fixture.h"
#include "spindle/adapters/peft.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/engine/safetensors.h"

namespace spindle::adapters {
namespace {

using catalog::testing::adapter;
using catalog::testing::catch_error;
using catalog::testing::same_weights;
using catalog::testing::tiny;
using engine::LoraTarget;

const RevisionBase kBase{.base_model_id = "tiny", .base_checksum = "c0ffee"};

TEST(RevisionFormat, RoundTripIsBitExactWithMetadata) {
  const LoraTarget all[] = {LoraTarget::q,    LoraTarget::k,      LoraTarget::v,
                            LoraTarget::o,    LoraTarget::gate,   LoraTarget::up,
                            LoraTarget::down, LoraTarget::lm_head};
  auto w = engine::LoraWeights::random(tiny(), 6, 12.0f, all, 5, 0.2f, 0.2f);
  w.use_rslora = true;
  const std::string bytes = encode_revision(w, revision_meta_for(w, kBase));
  const DecodedRevision d = decode_revision(bytes, "test");
  EXPECT_TRUE(same_weights(w, d.weights));
  EXPECT_EQ(d.meta.base_model_id, "tiny");
  EXPECT_EQ(d.meta.base_checksum, "c0ffee");
  EXPECT_EQ(d.meta.rank, 6);
  EXPECT_EQ(d.meta.alpha, 12.0f);
  EXPECT_TRUE(d.meta.use_rslora);
  EXPECT_EQ(d.meta.targets.size(), 8u);
  EXPECT_EQ(d.meta.n_layers, tiny().n_layers);
  EXPECT_EQ(d.meta.dtype, DType::f32);
  EXPECT_EQ(decode_revision_meta(bytes, "test").targets, d.meta.targets);
}

// Qwen3-MoE: the routed experts' LoRA travels packed ([E, r, d_in] / [E, d_out, r] per layer
// and projection) beside the dense modules, and comes back bit for bit.
TEST(RevisionFormat, RoutedExpertsRoundTripPacked) {
  const engine::ModelConfig c = testing::tiny_config(engine::Arch::qwen3_moe);
  const LoraTarget all[] = {LoraTarget::q,  LoraTarget::o,    LoraTarget::gate,
                            LoraTarget::up, LoraTarget::down, LoraTarget::lm_head};
  const auto w = engine::LoraWeights::random(c, 4, 8.0f, all, 9, 0.2f, 0.2f);
  ASSERT_TRUE(w.has_experts());
  const std::string bytes = encode_revision(w, revision_meta_for(w, kBase));
  const DecodedRevision d = decode_revision(bytes, "moe");
  EXPECT_TRUE(same_weights(w, d.weights));
  d.weights.validate(c, "decoded");
  const auto header = engine::parse_safetensors_header(
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), bytes.size(), "moe");
  bool packed = false, dense_mlp_on_dense_layer = false;
  for (const auto& e : header.entries) {
    if (e.name == "base_model.model.model.layers.0.mlp.experts.up_proj.lora_A.packed") {
      packed = e.shape == Shape{c.moe.n_experts, 4, c.dim};
    }
    dense_mlp_on_dense_layer |=
        e.name == "base_model.model.model.layers.1.mlp.up_proj.lora_A.weight";
  }
  EXPECT_TRUE(packed);
  EXPECT_TRUE(dense_mlp_on_dense_layer);
  // A packed tensor whose rank axis disagrees is named.
  auto bad = w.clone();
  bad.experts[0][1].A = Tensor({c.moe.n_experts, 3, c.dim});
  const auto caught = catch_error([&] { encode_revision(bad, revision_meta_for(bad, kBase)); });
  EXPECT_NE(caught.message.find("mlp.experts.up_proj"), std::string::npos) << caught.message;
}

TEST(RevisionFormat, EncodingIsDeterministic) {
  const auto w = adapter(1);
  const std::string a = encode_revision(w, revision_meta_for(w, kBase));
  const std::string b = encode_revision(adapter(1), revision_meta_for(w, kBase));
  EXPECT_EQ(a, b);
  const auto w2 = adapter(2);
  EXPECT_NE(a, encode_revision(w2, revision_meta_for(w2, kBase)));
}

// put_stream runs stream_revision twice at once over the same weights (one pass writes, one
// hashes): both streams are the encoded bytes, piece for piece, in f32 and bf16.
TEST(RevisionFormat, ConcurrentStreamsGiveTheEncodedBytes) {
  const auto w = adapter(4);
  for (DType dtype : {DType::f32, DType::bf16}) {
    RevisionBase base = kBase;
    base.dtype = dtype;
    const RevisionMeta meta = revision_meta_for(w, base);
    std::string streams[2];
    size_t pieces[2] = {0, 0};
    std::thread other([&] {
      stream_revision(w, meta, [&](const void* p, size_t n) {
        streams[1].append(static_cast<const char*>(p), n);
        ++pieces[1];
      });
    });
    stream_revision(w, meta, [&](const void* p, size_t n) {
      streams[0].append(static_cast<const char*>(p), n);
      ++pieces[0];
    });
    other.join();
    EXPECT_EQ(streams[0], streams[1]) << dtype_name(dtype);
    EXPECT_GT(pieces[0], 2u);  // header pieces, then the tensors one by one: never one buffer
    EXPECT_EQ(pieces[0], pieces[1]);
    const DecodedRevision d = decode_revision(streams[0], "stream");
    EXPECT_EQ(d.meta.dtype, dtype);
    if (dtype == DType::f32) EXPECT_TRUE(same_weights(w, d.weights));
  }
}

TEST(RevisionFormat, IsAStandardSafetensorsFileWithPeftKeys) {
  const auto w = adapter(3);
  const std::string bytes = encode_revision(w, revision_meta_for(w, kBase));
  const auto h = engine::parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                  bytes.size(), bytes.size(), "t");
  EXPECT_NE(h.find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"), nullptr);
  EXPECT_NE(h.find("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"), nullptr);
  EXPECT_EQ(h.entries.size(), 8u);  // 2 layers x 2 targets x (A, B)
  EXPECT_EQ(h.metadata.at("spindle.targets"), "q_proj,v_proj");
}

TEST(RevisionFormat, Bf16HalvesTheTensorBytes) {
  const auto w = adapter(4);
  RevisionBase base = kBase;
  base.dtype = DType::bf16;
  const std::string f32 = encode_revision(w, revision_meta_for(w, kBase));
  const std::string bf16 = encode_revision(w, revision_meta_for(w, base));
  EXPECT_LT(bf16.size(), f32.size() * 3 / 5);
  const DecodedRevision d = decode_revision(bf16, "t");
  EXPECT_EQ(d.meta.dtype, DType::bf16);
  const auto& a = w.modules[0][size_t(LoraTarget::q)].A;
  const auto& b = d.weights.modules[0][size_t(LoraTarget::q)].A;
  for (int64_t i = 0; i < a.numel(); ++i) {
    EXPECT_NEAR(a.data()[i], b.data()[i], std::abs(a.data()[i]) / 128 + 1e-7f);
  }
}

TEST(RevisionFormat, MetadataThatDisagreesWithWeightsIsRefused) {
  const auto w = adapter(5);
  RevisionMeta m = revision_meta_for(w, kBase);
  m.rank = 8;
  EXPECT_EQ(catch_error([&] { encode_revision(w, m); }).code, ErrorCode::invalid_argument);
  m = revision_meta_for(w, kBase);
  m.targets = {LoraTarget::q};
  EXPECT_EQ(catch_error([&] { encode_revision(w, m); }).code, ErrorCode::invalid_argument);
  m = revision_meta_for(w, kBase);
  m.dtype = DType::i32;
  EXPECT_EQ(catch_error([&] { encode_revision(w, m); }).code, ErrorCode::unsupported);
}

TEST(RevisionFormat, DamagedFilesAreRefusedNamingTheSource) {
  EXPECT_EQ(catch_error([] { decode_revision("not a safetensors file", "blob x"); }).code,
            ErrorCode::format);
  // A plain safetensors file without Spindle metadata.
  const auto w = adapter(6);
  std::string bytes = encode_revision(w, revision_meta_for(w, kBase));
  const size_t at = bytes.find("lora-revision");
  ASSERT_NE(at, std::string::npos);
  bytes[at] = 'X';
  const auto err = catch_error([&] { decode_revision(bytes, "blob abc"); });
  EXPECT_EQ(err.code, ErrorCode::format);
  EXPECT_NE(err.message.find("blob abc"), std::string::npos) << err.message;
  // Metadata claiming fewer layers than the tensors hold.
  std::string fewer = encode_revision(w, revision_meta_for(w, kBase));
  const size_t nl = fewer.find("\"spindle.n_layers\":\"2\"");
  ASSERT_NE(nl, std::string::npos);
  fewer[nl + std::string("\"spindle.n_layers\":\"").size()] = '1';
  EXPECT_NE(catch_error([&] { decode_revision(fewer, "t"); }).message.find("layers.1"),
            std::string::npos);
}

TEST(RevisionFormat, ReadsAPeftDirectoryWithoutABase) {
  auto w = adapter(7);
  const auto dir = catalog::testing::fresh_dir("peft");
  save_peft(w, dir, {.base_model_name_or_path = "tiny"});
  const PeftImport imp = read_peft_dir(dir);
  EXPECT_EQ(imp.config.base_model_name_or_path, "tiny");
  EXPECT_TRUE(same_weights(w, imp.weights));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace spindle::adapters
