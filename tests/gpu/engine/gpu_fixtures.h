#pragma once
// Shared pieces of the GPU engine tests (the device skip is ../gpu_test_util.h's): tiny configs
// the CUDA attention accepts (head_dim a multiple of 8), a CPU reference run through
// engine::Model with an engine::LoraSlotPool, and a logits comparison that names the first
// mismatch.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../../unit/model/model_fixtures.h"
#include "../gpu_test_util.h"
#include "spindle/engine/model.h"

namespace spindle::testing {

// |got − want| <= tol · max(1, max_j |want[r, j]|) for every element of row r.
// On failure names the first mismatch: row, column, got, want, allowed error.
inline ::testing::AssertionResult rows_close(const float* got, const float* want, int64_t rows,
                                             int64_t cols, float tol, const std::string& what,
                                             float* worst_rel = nullptr) {
  float worst = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    float scale = 1.0f;
    for (int64_t j = 0; j < cols; ++j) scale = std::max(scale, std::abs(want[r * cols + j]));
    for (int64_t j = 0; j < cols; ++j) {
      const float g = got[r * cols + j], w = want[r * cols + j];
      const float err = std::abs(g - w);
      worst = std::max(worst, err / scale);
      if (!(err <= tol * scale)) {  // also catches NaN
        if (worst_rel) *worst_rel = worst;
        return ::testing::AssertionFailure()
               << what << ": mismatch at row " << r << " col " << j << ": got " << g
               << ", want " << w << ", |diff| " << err << " > allowed " << tol * scale
               << " (tol " << tol << " x row scale " << scale << ")";
      }
    }
  }
  if (worst_rel) *worst_rel = worst;
  return ::testing::AssertionSuccess();
}

// One sequence run alone on the CPU engine, chunk by chunk (one forward per chunk, every
// token's logits), with `adapter` in slot 0 of a CPU slot pool (or none).
class CpuSequence {
 public:
  CpuSequence(const engine::ModelWeights& w, const engine::LoraWeights* adapter,
              int32_t max_rank = 64)
      : model_(w), cache_(w.config, {.block_size = 4, .n_blocks = 0, .max_seqs = 1}) {
    if (adapter) {
      pool_ = std::make_unique<engine::LoraSlotPool>(
          w.config, engine::LoraPoolOptions{.max_slots = 1, .max_rank = max_rank});
      pool_->load(0, *adapter);
    }
    seq_ = cache_.create();
  }
  // Feeds `tokens`; returns their logits [n, vocab] row-major.
  std::vector<float> feed(const std::vector<int32_t>& tokens) {
    const engine::BatchSequence b{seq_, tokens, pool_ ? 0 : -1};
    model_.forward({&b, 1}, cache_, pool_.get(), state_,
                   {.logits = engine::LogitsFor::all_tokens});
    return {state_.logits.data(), state_.logits.data() + state_.logits.numel()};
  }

 private:
  engine::Model model_;
  engine::KvCache cache_;
  std::unique_ptr<engine::LoraSlotPool> pool_;
  engine::ForwardState state_;
  engine::SeqId seq_ = -1;
};

}  // namespace spindle::testing
