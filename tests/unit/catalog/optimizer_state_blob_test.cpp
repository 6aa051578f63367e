// A revision may carry its optimizer state as its own blob: saved with the commit, read back
// bit-exactly, kept by GC while referenced, checked by check().

#include "catalog_fixture.h"
#include "spindle/engine/optimizer.h"

namespace spindle::catalog::testing {
namespace {

class OptimizerStateBlob : public CatalogTest {};

engine::AdamW trained_state(engine::LoraWeights& w) {
  engine::AdamW adam;
  engine::LoraWeights g = w.clone();
  std::vector<engine::ParamRef> refs;
  for (size_t l = 0; l < w.modules.size(); ++l)
    for (size_t t = 0; t < w.modules[l].size(); ++t) {
      if (w.modules[l][t].empty()) continue;
      const std::string key = engine::lora_module_key(int64_t(l), LoraTarget(t));
      refs.push_back({key + ".lora_A.weight", &w.modules[l][t].A, &g.modules[l][t].A});
      refs.push_back({key + ".lora_B.weight", &w.modules[l][t].B, &g.modules[l][t].B});
    }
  for (int i = 0; i < 3; ++i) adam.step(refs, {.learning_rate = 1e-2f});
  return adam;
}

TEST_F(OptimizerStateBlob, SavedWithTheRevisionAndReadBackExactly) {
  cat_->create_policy("acme", spec("p"), "test");
  engine::LoraWeights w = adapter(1);
  const engine::AdamW state = trained_state(w);
  const Revision plain = commit("acme", "p", 7);
  EXPECT_FALSE(plain.state_blob.has_value());
  EXPECT_FALSE(cat_->read_optimizer_state("acme", addr("acme", "p", plain.id)).has_value());

  clock_ms_ += 1000;
  const Revision with = cat_->commit_revision("acme", "p", w,
                                              {.actor = "test", .optimizer_state = &state});
  ASSERT_TRUE(with.state_blob.has_value());
  const auto back = cat_->read_optimizer_state("acme", addr("acme", "p", with.id));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->step_count(), 3);
  EXPECT_EQ(back->serialize(), state.serialize());
  // Tenant scoping holds for the state as for the weights.
  EXPECT_EQ(catch_error([&] { cat_->read_optimizer_state("other", addr("other", "p", with.id)); })
                .code,
            ErrorCode::not_found);

  // Referenced state blobs survive GC and are part of check().
  GcOptions gc;
  gc.blob_grace = std::chrono::seconds(0);
  cat_->gc(gc);
  EXPECT_TRUE(cat_->blobs().exists(*with.state_blob));
  EXPECT_TRUE(cat_->check().missing_blobs.empty());
  std::filesystem::remove(cat_->blobs().path_of(*with.state_blob));
  EXPECT_EQ(cat_->check().missing_blobs, std::vector<std::string>{*with.state_blob});
}

}  // namespace
}  // namespace spindle::catalog::testing
