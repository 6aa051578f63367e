#include "graph.h"

#include <algorithm>

#include <exception>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::engine_cuda::internal {

namespace cuda = kernels::cuda;

int32_t graph_context_bucket(int32_t max_ctx) {
  int64_t b = 16;
  while (b < max_ctx) b *= 2;
  return int32_t(b);
}

uint64_t lora_fingerprint(const DeviceLoraPool& pool, int64_t n_layers) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the views' fields
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (int64_t l = 0; l < n_layers; ++l) {
    for (int t = 0; t < engine::kLoraTargetCount; ++t) {
      const auto target = static_cast<engine::LoraTarget>(t);
      if (target == engine::LoraTarget::lm_head && l > 0) continue;
      const auto v = pool.view(l, target);
      if (!v) {
        mix(0);
        continue;
      }
      mix(reinterpret_cast<uintptr_t>(v->A));
      mix(reinterpret_cast<uintptr_t>(v->B));
      mix(reinterpret_cast<uintptr_t>(v->rank));
      mix(reinterpret_cast<uintptr_t>(v->scale));
      mix(uint64_t(v->max_slots));
      mix(uint64_t(v->max_rank));
      mix(uint64_t(v->d_in));
      mix(uint64_t(v->d_out));
    }
  }
  return h;
}

GraphCache::~GraphCache() {
  clear();
}

void GraphCache::clear() {
  for (auto& e : entries_) cudaGraphExecDestroy(e.second);
  entries_.clear();
}

cudaGraphExec_t GraphCache::find(const GraphKey& key) const {
  for (const auto& e : entries_) {
    if (e.first == key) return e.second;
  }
  return nullptr;
}

cudaGraphExec_t GraphCache::capture(const GraphKey& key, cudaStream_t stream,
                                    const std::function<void()>& enqueue) {
  if (entries_.size() >= kMaxGraphs) clear();
  cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
              "cudaStreamBeginCapture (decode graph)");
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    // End the capture whatever state it is in, then report what the enqueue threw.
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) {
      cudaGraphDestroy(graph);
    }
    cudaGetLastError();  // clears a capture-invalidation error left by the failed call
    throw;
  }
  cuda::check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture (decode graph)");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t st = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  cuda::check(st, "cudaGraphInstantiate (decode graph)");
  entries_.emplace_back(key, exec);
  return exec;
}

void GraphCache::refuse(const GraphKey& key) {
  if (refused_.size() >= kMaxGraphs) refused_.clear();
  if (!refused(key)) refused_.push_back(key);
}

bool GraphCache::refused(const GraphKey& key) const {
  return std::find(refused_.begin(), refused_.end(), key) != refused_.end();
}

void GraphCache::launch(cudaGraphExec_t exec, cudaStream_t stream) {
  cuda::check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch (decode graph)");
}

}  // namespace spindle::engine_cuda::internal
