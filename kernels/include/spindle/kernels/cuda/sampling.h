#pragma once
// Token sampling on the GPU, one row of logits per sequence: greedy (temperature 0, first index
// on ties), temperature, top-k, top-p, with per-row seeds (Philox via curand, keyed by the row's
// seed and its `counter`, e.g. the token index, so a row's draw does not depend on which other
// rows share the batch). The reported logprob is the raw log_softmax(logits)[token] before
// temperature and truncation (engine/sampler.h's convention).

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda {

struct RowSampling {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;
  uint64_t counter = 0;      // draw index within the row's stream
};

// logits: [rows, vocab] row stride ld (T = float or bf16). params: [rows] device.
// tokens, logprobs: [rows] device outputs. `scratch` is sampling_scratch_bytes(rows, vocab)
// bytes of device memory (non-null when rows > 0: per-chunk statistics and each row's top-k /
// top-p candidates), not shared with another sample_tokens call in flight.
// Top-k and top-p cut the order (logit desc, index asc), ties at a cut lowest index first; top-p
// keeps the shortest prefix of the top-k whose tempered mass reaches top_p of theirs (at least
// one token). Masses are exact fixed-point integers and the draw walks cumulative mass in index
// order, so the token is a function of (row, params) only.
size_t sampling_scratch_bytes(int64_t rows, int64_t vocab);
template <class T>
void sample_tokens(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                   const RowSampling* params, int32_t* tokens, float* logprobs, void* scratch,
                   cudaStream_t stream);

// sample_tokens without the candidate pre-filter (every row is cut and drawn over all its
// logits): the same tokens and logprobs, slower. For tests of the pre-filter.
template <class T>
void sample_tokens_full_row(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                            const RowSampling* params, int32_t* tokens, float* logprobs,
                            void* scratch, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
