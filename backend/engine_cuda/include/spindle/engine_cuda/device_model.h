#pragma once
// The decoder forward pass on a CUDA device over a ragged, heterogeneous batch: the twin of
// engine::Model::forward (engine/model.h; same batch, same validation and messages, same
// LogitsFor rows). Base weights come from a shared DeviceWeights, K/V go to a DeviceKvCache of
// the same Precision, LoRA through the SGMV kernels over a DeviceLoraPool.
//
// Per layer: rmsnorm, q/k/v projections (+ LoRA), Qwen3 q/k norms, RoPE (half style), KV write,
// paged attention, o projection (+ LoRA) added to the residual, MLP (gate/up + LoRA, SwiGLU,
// down + LoRA) added to the residual. Then the final norm on the logits rows and the
// unembedding (+ lm_head LoRA).
//
// Streams: every DeviceModel owns one stream and one cuBLAS handle; all its work is queued
// there. forward() returns after queuing, except that copying logits to the host (the default)
// waits for the stream. Threading: one thread drives a DeviceModel.

#include <cstdint>
#include <memory>
#include <span>

#include "spindle/core/tensor.h"
#include "spindle/engine/model.h"
#include "spindle/engine_cuda/device_kv_cache.h"
#include "spindle/engine_cuda/device_lora_pool.h"
#include "spindle/engine_cuda/device_weights.h"
#include "spindle/engine_cuda/forward_state.h"
#include "spindle/kernels/cuda/gemm.h"

namespace spindle::engine_cuda {

namespace internal {
class GraphCache;
}  // namespace internal

struct DeviceForwardOptions {
  engine::LogitsFor logits = engine::LogitsFor::last_token;
  bool keep_activations = false;  // keep every layer's intermediates (for a backward pass)
  bool copy_logits = true;        // copy logits to state.host_logits as fp32 (waits)
  // Pure decode batches (every sequence one new token, last_token logits, no
  // keep_activations) replay a captured CUDA graph (backend/engine_cuda/src/graph.h); other batches
  // run eagerly. Same kernels either way, so the logits are bitwise those of an eager forward.
  // A graph is captured after the first eager run of a new shape; failing capture throws
  // CudaError (no silent fallback). A routed-experts model never captures: its routing is chosen
  // on the host mid-forward (DeviceOps::moe_route), so its decode steps run eagerly.
  bool use_graph = false;
};

class DeviceModel {
 public:
  // `weights` must outlive the model. Throws unsupported when head_dim is not a multiple of 8
  // or exceeds 256 (the CUDA attention kernels' contract).
  explicit DeviceModel(const DeviceWeights& weights);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  const engine::ModelConfig& config() const { return weights_.config(); }
  const DeviceWeights& weights() const { return weights_; }
  Precision precision() const { return weights_.precision(); }
  cudaStream_t stream() const { return stream_.get(); }
  kernels::cuda::Blas& blas() { return blas_; }

  // Runs the batch, appending each sequence's new K/V to `cache`; leaves logits in
  // state.logits on the device ([n_sequences, vocab] for last_token, [T, vocab] for all_tokens,
  // rows in batch order) and, with options.copy_logits, in state.host_logits. `lora` may be
  // null when every slot is −1. Validates the batch first, as engine::Model (token ids, slots
  // occupied, context, KV blocks, cache precision); on error nothing is appended.
  void forward(std::span<const engine::BatchSequence> batch, DeviceKvCache& cache,
               const DeviceLoraPool* lora, DeviceForwardState& state,
               const DeviceForwardOptions& options = {});

  // Rows [r0, r1) of an all-token forward's x_final through the unembedding (+ lm_head LoRA)
  // into `logits` ([r1 − r0, vocab], the model's Precision), queued on stream().
  void unembed(DeviceForwardState& state, const DeviceLoraPool* lora, int64_t r0, int64_t r1,
               DeviceTensor& logits);

  // Waits for all work queued on stream().
  void synchronize() const { stream_.synchronize(); }

  // Decode graphs currently cached (for tests); clear_graphs() drops them all.
  size_t cached_graphs() const;
  void clear_graphs();

 private:
  void validate(std::span<const engine::BatchSequence> batch, const DeviceKvCache& cache,
                const DeviceLoraPool* lora) const;
  // Host tables of the batch (positions, slots, segments, block tables), appended to the
  // cache, packed into st.tables' staging with the device views set (nothing copied yet); the
  // stream waits for the adapters the batch uses. Returns the bytes the forward must copy (for
  // a graph: sized for its context bucket, so every replay of the graph copies enough).
  size_t lay_out(std::span<const engine::BatchSequence> batch, DeviceKvCache& cache,
                 const DeviceLoraPool* lora, DeviceForwardState& st,
                 const DeviceForwardOptions& options, bool graph);
  // Queues the table copy and the layer compute on stream().
  void enqueue(DeviceKvCache& cache, const DeviceLoraPool* lora, DeviceForwardState& st,
               const DeviceForwardOptions& options, size_t table_bytes);
  // The graph path of forward(): replay a cached graph, or run eagerly and capture one.
  void run_graph(DeviceKvCache& cache, const DeviceLoraPool* lora, DeviceForwardState& st,
                 const DeviceForwardOptions& options, size_t table_bytes);

  const DeviceWeights& weights_;
  kernels::cuda::Stream stream_;
  kernels::cuda::Blas blas_;
  kernels::cuda::DeviceBuffer<kernels::LoraSegment> chunk_segments_;  // unembed's row chunk
  std::unique_ptr<internal::GraphCache> graphs_;
};

}  // namespace spindle::engine_cuda
