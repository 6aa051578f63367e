#include "spindle/engine_cuda/device_model.h"

#include <algorithm>
#include <cstring>

#include "device_forward.h"
#include "graph.h"
#include "spindle/core/error.h"
#include "spindle/engine/forward_checks.h"

namespace spindle::engine_cuda {
namespace {

namespace cuda = kernels::cuda;
using engine::append_segment;
using engine::BatchSequence;
using engine::LogitsFor;

template <class V>
size_t table_bytes(const V& v) {
  return TableStaging::aligned(v.size() * sizeof(typename V::value_type));
}

template <class T>
DeviceTable<T> pack(TableStaging& tables, const std::vector<T>& host) {
  const size_t at = tables.put(host.data(), host.size() * sizeof(T));
  return {tables.device_at<T>(at)};
}

// Pure decode: every sequence feeds one token, last-token logits, nothing kept.
bool graph_eligible(std::span<const BatchSequence> batch, const DeviceForwardOptions& o) {
  if (!o.use_graph || o.keep_activations || o.logits != LogitsFor::last_token) return false;
  for (const auto& b : batch) {
    if (b.tokens.size() != 1) return false;
  }
  return true;
}

}  // namespace

DeviceModel::DeviceModel(const DeviceWeights& weights)
    : weights_(weights), graphs_(std::make_unique<internal::GraphCache>()) {
  // (MLA's attention widths, the latent row and the padded head, are DeviceWeights' checks.)
  const int64_t hd = weights.config().head_dim;
  SPINDLE_CHECK(weights.config().mla_attention() || (hd % 8 == 0 && hd <= 256), unsupported,
                "GPU attention needs head_dim a multiple of 8 and <= 256, the model has {}", hd);
}

DeviceModel::~DeviceModel() = default;

size_t DeviceModel::cached_graphs() const {
  return graphs_->size();
}

void DeviceModel::clear_graphs() {
  graphs_->clear();
}

void DeviceModel::validate(std::span<const BatchSequence> batch, const DeviceKvCache& cache,
                           const DeviceLoraPool* lora) const {
  // An empty batch is reported as such first (validate_forward_batch), as on the CPU.
  if (!batch.empty()) {
    SPINDLE_CHECK(cache.precision() == precision(), invalid_argument,
                  "forward: KV cache holds {} but the model runs in {}",
                  precision_name(cache.precision()), precision_name(precision()));
  }
  engine::validate_forward_batch(config(), batch, cache, lora);
}

size_t DeviceModel::lay_out(std::span<const BatchSequence> batch, DeviceKvCache& cache,
                            const DeviceLoraPool* lora, DeviceForwardState& st,
                            const DeviceForwardOptions& options, bool graph) {
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
  int32_t max_new = 0, max_ctx = 0;
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
    max_new = std::max(max_new, int32_t(n));
    max_ctx = std::max(max_ctx, int32_t(past + n));
    row += n;
  }
  if (options.logits != LogitsFor::last_token) st.out_segments = st.segments;
  st.rows_out = options.logits == LogitsFor::last_token ? int64_t(batch.size()) : st.T;
  st.keep_activations = options.keep_activations;
  st.all_tokens = options.logits != LogitsFor::last_token;
  st.attn_max_new = max_new;
  st.attn_max_ctx = graph ? internal::graph_context_bucket(max_ctx) : max_ctx;

  // One packed staging buffer; the variable-length block tables go last so that every other
  // table's offset depends only on the row and segment counts (a graph's key).
  const size_t fixed = table_bytes(st.positions) + table_bytes(st.tokens) +
                       table_bytes(st.cache_slots) + table_bytes(st.segments) +
                       table_bytes(st.out_segments) + table_bytes(st.attn_seqs) +
                       table_bytes(st.last_rows);
  size_t blocks = st.block_tables.size();
  if (graph) {
    // Every context is <= the bucket, so no sequence's table outgrows this.
    const int64_t per_seq = (st.attn_max_ctx + cache.block_size() - 1) / cache.block_size();
    blocks = std::max(blocks, size_t(per_seq) * batch.size());
  }
  const size_t total = fixed + blocks * sizeof(int32_t);
  st.tables.begin(total);  // waits until the previous forward's copy has read the staging
  st.d_positions = pack(st.tables, st.positions);
  st.d_tokens = pack(st.tables, st.tokens);
  st.d_cache_slots = pack(st.tables, st.cache_slots);
  st.d_segments = pack(st.tables, st.segments);
  st.d_out_segments = pack(st.tables, st.out_segments);
  st.d_attn_seqs = pack(st.tables, st.attn_seqs);
  st.d_last_rows = pack(st.tables, st.last_rows);
  st.d_block_tables = pack(st.tables, st.block_tables);
  // Adapters still loading on the pool's stream: wait on the device, only for the slots used.
  for (int32_t slot : st.slots_used) lora->wait_loaded(slot, s);
  return graph ? total : st.tables.used();
}

void DeviceModel::enqueue(DeviceKvCache& cache, const DeviceLoraPool* lora, DeviceForwardState& st,
                          const DeviceForwardOptions& options, size_t table_bytes) {
  st.tables.copy(table_bytes, stream());
  internal::ForwardContext ctx{weights_, blas_, stream(), lora, st};
  if (precision() == Precision::fp32) {
    internal::run_forward<float>(ctx, cache, options);
  } else {
    internal::run_forward<cuda::bf16>(ctx, cache, options);
  }
}

void DeviceModel::run_graph(DeviceKvCache& cache, const DeviceLoraPool* lora,
                            DeviceForwardState& st, const DeviceForwardOptions& options,
                            size_t table_bytes) {
  const cudaStream_t s = stream();
  const engine::ModelConfig& c = config();
  const bool adapted = lora != nullptr && !st.slots_used.empty();
  internal::GraphKey key{
      .state = &st,
      .cache_id = cache.id(),
      .lora = adapted ? lora : nullptr,
      .lora_fingerprint = adapted ? internal::lora_fingerprint(*lora, c.n_layers) : 0,
      .generation = device_generation(),
      .n_seqs = int32_t(st.attn_seqs.size()),
      .n_segments = int32_t(st.segments.size()),
      .n_out_segments = int32_t(st.out_segments.size()),
      .ctx_bucket = st.attn_max_ctx,
      .table_bytes = table_bytes};
  if (cudaGraphExec_t exec = graphs_->find(key)) {
    // The graph writes these; give them this batch's shapes (no reallocation: the capture
    // sized them and the generation has not moved since).
    const Precision p = precision();
    st.x_last.ensure(st.T, c.dim, p);
    st.x_gather.ensure(st.rows_out, c.dim, p);
    st.x_final.ensure(st.rows_out, c.dim, p);
    st.inv_rms_final.ensure(st.rows_out, 1, Precision::fp32);
    st.logits.ensure(st.rows_out, c.vocab_size, p);
    if (device_generation() == key.generation) {
      internal::GraphCache::launch(exec, s);
      st.tables.record(s);
      return;
    }
  }
  // A new shape: run it eagerly (this step's result; sizes every buffer), then capture the
  // same work for the next steps of this shape. A capture that fails leaves this step's eager
  // result standing and the key eager from then on (graph.h).
  enqueue(cache, lora, st, options, table_bytes);
  st.tables.record(s);
  key.generation = device_generation();
  if (graphs_->refused(key)) return;
  try {
    graphs_->capture(key, s, [&] { enqueue(cache, lora, st, options, table_bytes); });
  } catch (const std::exception&) {
    graphs_->refuse(key);
    return;
  }
  SPINDLE_CHECK(device_generation() == key.generation, internal,
                "forward: a buffer was reallocated while capturing a decode graph");
}

void DeviceModel::forward(std::span<const BatchSequence> batch, DeviceKvCache& cache,
                          const DeviceLoraPool* lora, DeviceForwardState& st,
                          const DeviceForwardOptions& options) {
  validate(batch, cache, lora);
  // A routed-experts forward waits for its routing on the host mid-forward: never captured.
  const bool graph = graph_eligible(batch, options) && config().moe.n_experts == 0;
  const size_t bytes = lay_out(batch, cache, lora, st, options, graph);
  if (graph) {
    run_graph(cache, lora, st, options, bytes);
  } else {
    enqueue(cache, lora, st, options, bytes);
    st.tables.record(stream());
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
    internal::run_unembed<float>(ctx, r0, r1, chunk_segments_.data(), int32_t(segs.size()), adapted,
                                 logits);
  } else {
    internal::run_unembed<cuda::bf16>(ctx, r0, r1, chunk_segments_.data(), int32_t(segs.size()),
                                      adapted, logits);
  }
}

}  // namespace spindle::engine_cuda
