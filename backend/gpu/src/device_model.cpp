#include "spindle/gpu/device_model.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "device_forward.h"
#include "spindle/core/error.h"

namespace spindle::gpu {
namespace {

namespace cuda = kernels::cuda;
using engine::BatchSequence;
using engine::LogitsFor;

void append_segment(std::vector<kernels::LoraSegment>& segs, int64_t begin, int64_t end,
                    int32_t slot) {
  if (!segs.empty() && segs.back().slot == slot && segs.back().row_end == begin) {
    segs.back().row_end = end;
  } else {
    segs.push_back({begin, end, slot});
  }
}

}  // namespace

DeviceModel::DeviceModel(const DeviceWeights& weights) : weights_(weights) {
  const int64_t hd = weights.config().head_dim;
  SPINDLE_CHECK(hd % 8 == 0 && hd <= 256, unsupported,
                "GPU attention needs head_dim a multiple of 8 and <= 256, the model has {}", hd);
}

void DeviceModel::validate(std::span<const BatchSequence> batch, const DeviceKvCache& cache,
                           const DeviceLoraPool* lora) const {
  const engine::ModelConfig& c = config();
  SPINDLE_CHECK(!batch.empty(), invalid_argument, "forward: empty batch");
  SPINDLE_CHECK(cache.precision() == precision(), invalid_argument,
                "forward: KV cache holds {} but the model runs in {}",
                precision_name(cache.precision()), precision_name(precision()));
  std::unordered_set<SeqId> seen;
  int64_t blocks = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchSequence& b = batch[i];
    SPINDLE_CHECK(!b.tokens.empty(), invalid_argument, "forward: sequence {} has no tokens", i);
    SPINDLE_CHECK(seen.insert(b.seq).second, invalid_argument,
                  "forward: KV sequence {} appears twice in one batch", b.seq);
    for (int32_t t : b.tokens) {
      SPINDLE_CHECK(t >= 0 && t < c.vocab_size, invalid_argument,
                    "forward: token id {} in sequence {} outside vocab [0, {})", t, i,
                    c.vocab_size);
    }
    const int64_t len = cache.length(b.seq);
    SPINDLE_CHECK(len + int64_t(b.tokens.size()) <= c.max_seq_len, invalid_argument,
                  "forward: sequence {} would reach {} tokens, the model's context is {}", i,
                  len + int64_t(b.tokens.size()), c.max_seq_len);
    if (b.slot >= 0) {
      SPINDLE_CHECK(lora != nullptr && b.slot < lora->max_slots() && lora->occupied(b.slot),
                    invalid_argument, "forward: sequence {} uses adapter slot {}, which holds no "
                    "adapter", i, b.slot);
    } else {
      SPINDLE_CHECK(b.slot == -1, invalid_argument, "forward: adapter slot {} (use -1 for base)",
                    b.slot);
    }
    blocks += cache.blocks_needed(b.seq, int64_t(b.tokens.size()));
  }
  SPINDLE_CHECK(blocks <= cache.free_blocks(), resource,
                "forward: batch needs {} KV blocks, {} free", blocks, cache.free_blocks());
}

void DeviceModel::lay_out(std::span<const BatchSequence> batch, DeviceKvCache& cache,
                          const DeviceLoraPool* lora, DeviceForwardState& st,
                          const DeviceForwardOptions& options) {
  const cudaStream_t s = stream();
  st.T = 0;
  for (const auto& b : batch) st.T += int64_t(b.tokens.size());
  st.positions.clear();
  st.tokens.clear();
  st.cache_slots.clear();
  st.segments.clear();
  st.out_segments.clear();
  st.attn_seqs.clear();
  st.block_tables.clear();
  st.last_rows.clear();
  st.slots_used.clear();
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchSequence& b = batch[i];
    const int64_t n = int64_t(b.tokens.size());
    const int64_t past = cache.length(b.seq);
    cache.append(b.seq, n, st.cache_slots, s);  // cannot fail after validate
    for (int64_t j = 0; j < n; ++j) st.positions.push_back(int32_t(past + j));
    st.tokens.insert(st.tokens.end(), b.tokens.begin(), b.tokens.end());
    append_segment(st.segments, row, row + n, b.slot);
    if (options.logits == LogitsFor::last_token) {
      append_segment(st.out_segments, int64_t(i), int64_t(i) + 1, b.slot);
    }
    const std::vector<int32_t>& table = cache.block_table(b.seq);
    st.attn_seqs.push_back({.row_begin = row,
                            .n_new = int32_t(n),
                            .n_past = int32_t(past),
                            .table_offset = int32_t(st.block_tables.size())});
    st.block_tables.insert(st.block_tables.end(), table.begin(), table.end());
    st.last_rows.push_back(int32_t(row + n - 1));
    if (b.slot >= 0 &&
        std::find(st.slots_used.begin(), st.slots_used.end(), b.slot) == st.slots_used.end()) {
      st.slots_used.push_back(b.slot);
    }
    row += n;
  }
  if (options.logits != LogitsFor::last_token) st.out_segments = st.segments;
  st.rows_out = options.logits == LogitsFor::last_token ? int64_t(batch.size()) : st.T;
  st.keep_activations = options.keep_activations;
  st.all_tokens = options.logits != LogitsFor::last_token;

  upload_table(st.positions, st.d_positions, s);
  upload_table(st.tokens, st.d_tokens, s);
  upload_table(st.cache_slots, st.d_cache_slots, s);
  upload_table(st.segments, st.d_segments, s);
  upload_table(st.out_segments, st.d_out_segments, s);
  upload_table(st.attn_seqs, st.d_attn_seqs, s);
  upload_table(st.block_tables, st.d_block_tables, s);
  upload_table(st.last_rows, st.d_last_rows, s);
  // Adapters still loading on the pool's stream: wait on the device, only for the slots used.
  for (int32_t slot : st.slots_used) lora->wait_loaded(slot, s);
}

void DeviceModel::forward(std::span<const BatchSequence> batch, DeviceKvCache& cache,
                          const DeviceLoraPool* lora, DeviceForwardState& st,
                          const DeviceForwardOptions& options) {
  validate(batch, cache, lora);
  lay_out(batch, cache, lora, st, options);
  internal::ForwardContext ctx{weights_, blas_, stream(), lora, st};
  if (precision() == Precision::fp32) {
    internal::run_forward<float>(ctx, cache, options);
  } else {
    internal::run_forward<cuda::bf16>(ctx, cache, options);
  }
  if (options.copy_logits && options.logits != LogitsFor::hidden_only) {
    const std::vector<float> host = st.logits.download(stream());
    if (st.host_logits.rank() != 2 || st.host_logits.dim(0) != st.logits.rows() ||
        st.host_logits.dim(1) != st.logits.cols()) {
      st.host_logits = Tensor({st.logits.rows(), st.logits.cols()});
    }
    std::memcpy(st.host_logits.data(), host.data(), host.size() * sizeof(float));
  } else {
    st.host_logits = Tensor();
  }
}

void DeviceModel::unembed(DeviceForwardState& st, const DeviceLoraPool* lora, int64_t r0,
                          int64_t r1, DeviceTensor& logits) {
  SPINDLE_CHECK(0 <= r0 && r0 < r1 && r1 <= st.x_final.rows(), invalid_argument,
                "unembed: rows [{}, {}) outside [0, {})", r0, r1, st.x_final.rows());
  std::vector<kernels::LoraSegment> segs;
  bool adapted = false;
  for (const auto& sg : st.out_segments) {
    const int64_t b = std::max(sg.row_begin, r0), e = std::min(sg.row_end, r1);
    if (b < e) {
      segs.push_back({b - r0, e - r0, sg.slot});
      adapted |= sg.slot >= 0;
    }
  }
  SPINDLE_CHECK(!adapted || lora != nullptr, invalid_argument,
                "unembed: rows use adapter slots but no LoRA pool was given");
  upload_table(segs, chunk_segments_, stream());
  internal::ForwardContext ctx{weights_, blas_, stream(), lora, st};
  if (precision() == Precision::fp32) {
    internal::run_unembed<float>(ctx, r0, r1, chunk_segments_.data(), int32_t(segs.size()),
                                 adapted, logits);
  } else {
    internal::run_unembed<cuda::bf16>(ctx, r0, r1, chunk_segments_.data(), int32_t(segs.size()),
                                      adapted, logits);
  }
}

}  // namespace spindle::gpu
