#pragma once
// Central differences of a loss that is only piecewise smooth (routed experts: a token's top-k
// choice flips somewhere along a direction), shared by the CPU and the GPU gradient checks.

#include <cmath>
#include <optional>
#include <span>
#include <vector>

#include "spindle/engine/kv_cache.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/model.h"
#include "spindle/engine/trainer.h"

namespace spindle::testing {

// Every sparse layer's expert choices for every token of `batch` (empty for dense models).
inline std::vector<int32_t> routing(const engine::Model& model, const engine::LoraSlotPool* pool,
                                    std::span<const engine::TrainDatum> batch, bool use_slots) {
  if (model.config().moe.n_experts == 0) return {};
  engine::KvCache cache(model.config(),
                        {.block_size = 16, .n_blocks = 0, .max_seqs = int64_t(batch.size())});
  std::vector<engine::BatchSequence> seqs;
  for (const auto& d : batch) {
    seqs.push_back({cache.create(), d.input_tokens, use_slots ? d.slot : -1});
  }
  engine::ForwardState st;
  model.forward(seqs, cache, pool, st,
                {.logits = engine::LogitsFor::hidden_only, .keep_activations = true});
  std::vector<int32_t> out;
  for (const auto& a : st.layers) out.insert(out.end(), a.moe.expert.begin(), a.moe.expert.end());
  return out;
}

// (f(eps) − f(−eps)) / 2·eps, where f(e) is the loss with the perturbation e applied and
// routes(e) the routing under it. With routed experts the loss is only piecewise smooth (a
// token's top-k choice flips somewhere along the direction): the step halves until the routing
// at ±eps is the unperturbed one (at most 5 times: smaller steps drown in the loss's fp32
// rounding). nullopt when no such step avoids a flip. `rounding` is the estimate's share of
// the loss's fp32 rounding (a few ulps over 2·eps) once the step was shrunk, 0 otherwise.
struct Difference {
  double value = 0;
  double rounding = 0;
};
template <class F, class R>
std::optional<Difference> central_difference(F&& f, R&& routes, float eps) {
  const auto at0 = routes(0.0f);
  for (int i = 0; i < 6; ++i, eps /= 2) {
    if (routes(eps) != at0 || routes(-eps) != at0) continue;
    const double hi = f(eps), lo = f(-eps);
    const double ulps = i == 0 ? 0.0 : 4 * 6e-8 * (std::abs(hi) + std::abs(lo));
    return Difference{(hi - lo) / (2.0 * double(eps)), ulps / (2.0 * double(eps))};
  }
  return std::nullopt;
}

}  // namespace spindle::testing
