#pragma once
// Multi-head Latent Attention's device kernels beside the shared ones (GEMMs, attention, norms):
// RoPE on each head's last columns, the absorbed LoRA of kv_b_proj (CPU: engine/src/cpu_mla.cpp),
// a per-head column sum and per-head column moves between layouts. Shapes follow the CPU engine:
// H heads, dn nope and dr rope query/key columns (qw = dn + dr per query head), dv value columns,
// R the latent rank (lw = R + dr per latent row), kvw = dn + dv rows of kv_b_proj per head.
// All element types T are float or bf16; arithmetic in fp32. Every call is queued on `stream`,
// never allocates, and throws std::invalid_argument ("<kernel>: ...") on a contract violation.

#include <cstdint>

#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/runtime.h"
#include "spindle/kernels/rope.h"

namespace spindle::kernels::cuda {

// x: [rows, heads·w] (row stride ld >= heads·w). For each row t and head h, the last dr columns
// of x[t, h·w : (h+1)·w] are rotated at position pos[t] (inv_freq: [dr/2] fp32 device; style
// half or interleaved; the inverse rotation when `inverse`), then multiplied by `factor` (YaRN's
// attention factor; 1 = none): the CPU engine's kernels::rope followed by the multiply, the
// rotation with cuda::rope's arithmetic (fp32 angle pos·inv_freq, sincosf, unfused products).
// dr even, 0 < dr <= w. pos: [rows] device.
template <class T>
void mla_rope(T* x, int64_t ld, int64_t rows, int64_t heads, int64_t w, int64_t dr,
              const int32_t* pos, const float* inv_freq, RopeStyle style, bool inverse,
              float factor, cudaStream_t stream);

// The absorbed LoRA of kv_b_proj on the query. `slots` is kv_b's view (d_in = R,
// d_out = heads·kvw; A_s = slots.A + s·max_rank·R row-major [max_rank, R], B_s = slots.B +
// s·d_out·max_rank row-major [d_out, max_rank]). For every row t of a segment with slot s >= 0
// and rank r = slots.rank[s] > 0, scale c = slots.scale[s], and every head h:
//   u[j] = Σ_{i<dn} q[t, h·qw + i] · B_s[h·kvw + i, j]        (j < r)
//   q_abs[t, h·lw + k] += c · Σ_{j<r} u[j] · A_s[j, k]           (k < R, lw = R + dr)
// Rows of base-only (slot −1) or rank-0 segments are untouched. segs: kv_b's row segments of
// the batch (device; segs.rows rows). q: [rows, heads·qw] (ld_q), q_abs: [rows, heads·lw]
// (ld_abs); they must not overlap.
template <class T>
void mla_lora_absorb_q(const T* q, int64_t ld_q, int64_t heads, int64_t qw, int64_t dn, int64_t kvw,
                       int64_t lw, const DeviceLoraSlots& slots, const DeviceSegments& segs,
                       T* q_abs, int64_t ld_abs, cudaStream_t stream);

// The absorbed LoRA of kv_b_proj on the attended latent. For adapted rows t (as above) and
// heads h:
//   u[j] = Σ_{k<R} A_s[j, k] · o_lat[t, h·lw + k]                (j < r)
//   out[t, h·dv + i] += c · Σ_{j<r} B_s[h·kvw + dn + i, j] · u[j] (i < dv)
// o_lat: [rows, heads·lw] (ld_lat), out: [rows, heads·dv] (ld_out); they must not overlap.
template <class T>
void mla_lora_absorb_out(const T* o_lat, int64_t ld_lat, int64_t heads, int64_t lw, int64_t dn,
                         int64_t dv, int64_t kvw, const DeviceLoraSlots& slots,
                         const DeviceSegments& segs, T* out, int64_t ld_out, cudaStream_t stream);

// out[t, i] = Σ_{h<heads} x[t, h·w + off + i] for i < n (fp32, heads added in order 0, 1, ...,
// as the CPU engine does). out: [rows, n] (ld_out), overwritten; it must not overlap x.
template <class T>
void sum_heads(const T* x, int64_t ld, int64_t rows, int64_t heads, int64_t w, int64_t off,
               int64_t n, T* out, int64_t ld_out, cudaStream_t stream);

// dst[t, h·dst_w + dst_off + i] = src[t, h·src_w + src_off + i] for i < n, h < heads, t < rows:
// per-head column blocks moved between layouts (MLA's padded heads and back); src_w 0 gives
// every head the same source columns (the shared rope key). Other columns of dst are untouched;
// src and dst must not overlap.
template <class T>
void copy_head_cols(const T* src, int64_t ld_src, int64_t src_w, int64_t src_off, T* dst,
                    int64_t ld_dst, int64_t dst_w, int64_t dst_off, int64_t rows, int64_t heads,
                    int64_t n, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
