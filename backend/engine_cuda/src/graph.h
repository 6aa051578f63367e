#pragma once
// CUDA graphs of pure decode forwards (DeviceForwardOptions::use_graph): the forward's device
// work (the packed table copy, every kernel, every cuBLAS call) captured once and replayed.
//
// A capture bakes launch parameters and addresses, so a graph is cached under everything that
// shapes them (GraphKey): the state, cache (by id) and pool it reads, the batch's row and segment
// counts, the attention context bucket (grids sized for the bucket; the decode kernel exits
// blocks beyond each sequence's real context, which it reads from device memory), the size of
// the table copy, the cache's id, and device_generation() at capture time (any DeviceTensor or
// staging reallocation by this thread since then makes the key miss). What changes step to step
// lives in device memory the graph reads: tokens, positions, KV slots, block tables, segments,
// adapter weights. A key whose capture failed is remembered and runs eagerly from then on (a
// graph is an optimisation: the step that tried it already ran eagerly and stands).
//
// Threading: one thread drives a GraphCache (the DeviceModel's engine loop).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "spindle/engine_cuda/device_lora_pool.h"

namespace spindle::engine_cuda::internal {

// The attention max_ctx a graph is captured for: the smallest power of two >= max(max_ctx, 16).
int32_t graph_context_bucket(int32_t max_ctx);

// Hash of every SGMV view the pool hands out (addresses and sizes) over `n_layers` layers.
uint64_t lora_fingerprint(const DeviceLoraPool& pool, int64_t n_layers);

struct GraphKey {
  const void* state = nullptr;
  uint64_t cache_id = 0;  // DeviceKvCache::id(): unique even for a new cache at a reused address
  const void* lora = nullptr;  // null when no row of the batch is adapted
  uint64_t lora_fingerprint = 0;
  uint64_t generation = 0;
  int32_t n_seqs = 0;
  int32_t n_segments = 0;
  int32_t n_out_segments = 0;
  int32_t ctx_bucket = 0;
  size_t table_bytes = 0;
  bool operator==(const GraphKey&) const = default;
};

class GraphCache {
 public:
  static constexpr size_t kMaxGraphs = 64;  // beyond this the cache is emptied first

  GraphCache() = default;
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The executable graph cached under `key`, or null.
  cudaGraphExec_t find(const GraphKey& key) const;
  // Captures what `enqueue` queues on `stream` (cudaStreamCaptureModeThreadLocal), instantiates
  // it and caches it under `key`. Nothing runs. Throws CudaError naming the failing call (or
  // rethrows what `enqueue` threw) with the capture ended and nothing cached.
  cudaGraphExec_t capture(const GraphKey& key, cudaStream_t stream,
                          const std::function<void()>& enqueue);
  static void launch(cudaGraphExec_t exec, cudaStream_t stream);
  void clear();
  size_t size() const { return entries_.size(); }

  // Keys whose capture failed (bounded like the graphs: emptied beyond kMaxGraphs).
  void refuse(const GraphKey& key);
  bool refused(const GraphKey& key) const;
  size_t refused_count() const { return refused_.size(); }

 private:
  std::vector<std::pair<GraphKey, cudaGraphExec_t>> entries_;
  std::vector<GraphKey> refused_;
};

}  // namespace spindle::engine_cuda::internal
