#pragma once
// SwiGLU and embedding gather/scatter on the GPU (semantics of kernels/activation.h).

#include <cstdint>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda {

// out = silu(gate) · up, elementwise, fp32 math; out may alias gate or up.
template <class T>
void swiglu(const T* gate, const T* up, T* out, int64_t count, cudaStream_t stream);

// d_gate = d_out·up·silu'(gate), d_up = d_out·silu(gate); outputs must not alias inputs.
template <class T>
void swiglu_backward(const T* gate, const T* up, const T* d_out, T* d_gate, T* d_up,
                     int64_t count, cudaStream_t stream);

// out[r, :] = table[tokens[r], :] for r < rows. table: [vocab, dim] dense; out row stride ld_out.
// tokens: device. Token ids are validated by the caller (the engine checks them on the host).
template <class T>
void embedding_gather(const T* table, int64_t dim, const int32_t* tokens, int64_t rows, T* out,
                      int64_t ld_out, cudaStream_t stream);

// d_table[tokens[r], :] += d_out[r, :] (fp32 accumulation with atomics; repeated tokens add up).
template <class T>
void embedding_scatter_add(const T* d_out, int64_t ld_d_out, const int32_t* tokens, int64_t rows,
                           int64_t dim, float* d_table, cudaStream_t stream);

// x[t, :] = beta·x[t, :] + Σ_{k<K} w[t·K + k]·src[pos[t·K + k], :] for t < rows: the terms
// added one at a time in k order in fp32 (w null: weights 1; beta 0 never reads x). Routed
// experts' combine (beta 1, the routing weights; pos = token t's rows of the experts' outputs in
// ascending order, as the CPU engine adds them) and the scatter of their input gradients
// (beta 0, w null). pos and w: device; every pos < src's rows (the caller's contract).
template <class T>
void moe_combine(const T* src, int64_t ld_src, const int32_t* pos, const float* w, int64_t rows,
                 int64_t K, int64_t dim, float beta, T* x, int64_t ld_x, cudaStream_t stream);

// moe_combine's backward over the n rows of the experts' outputs (sorted order): for each row i,
// d_out[i, :] = w[i]·dy[rows[i], :] and d_w[i] = Σ_c dy[rows[i], c]·out[i, c] (fp32, one fixed
// reduction order: the same inputs give the same bits). rows, w: device [n]; d_w: device [n].
// d_out must not alias dy or out.
template <class T>
void moe_combine_backward(const T* dy, int64_t ld_dy, const int32_t* rows, const float* w,
                          const T* out, int64_t ld_out, int64_t n, int64_t dim, T* d_out,
                          int64_t ld_d_out, float* d_w, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
