// llama2.c -> HF directory -> load: the same model, tensor for tensor.

#include "loader_test_util.h"
#include "shared_fixtures.h"
#include "spindle/engine/loader.h"

namespace spindle::loader_test {
namespace {

TEST(Convert, Stories260KToHfDirLoadsIdentically) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const engine::ModelWeights original = engine::load_model(bin);
  TempDir dir("convert");
  const auto out = dir / "stories260K-hf";  // created by save_hf_dir
  engine::save_hf_dir(original, out);
  EXPECT_TRUE(fs::exists(out / "config.json"));
  const engine::ModelWeights back = engine::load_model(out);
  expect_same_weights(original, back);
  const auto& a = original.config;
  const auto& b = back.config;
  EXPECT_EQ(b.arch, a.arch);
  EXPECT_EQ(b.dim, a.dim);
  EXPECT_EQ(b.hidden_dim, a.hidden_dim);
  EXPECT_EQ(b.n_layers, a.n_layers);
  EXPECT_EQ(b.n_heads, a.n_heads);
  EXPECT_EQ(b.n_kv_heads, a.n_kv_heads);
  EXPECT_EQ(b.head_dim, a.head_dim);
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.max_seq_len, a.max_seq_len);
  EXPECT_EQ(b.rope_theta, a.rope_theta);
  EXPECT_EQ(b.rms_eps, a.rms_eps);
  EXPECT_EQ(b.tie_embeddings, a.tie_embeddings);
  EXPECT_EQ(b.bos_id, a.bos_id);
  EXPECT_EQ(b.eos_id, a.eos_id);

  // Saving again over an existing directory replaces it in place.
  engine::save_hf_dir(back, out, DType::bf16);
  expect_same_weights(original, engine::load_model(out),
                      [](float x) { return bf16_to_f32(f32_to_bf16(x)); });
}

}  // namespace
}  // namespace spindle::loader_test
