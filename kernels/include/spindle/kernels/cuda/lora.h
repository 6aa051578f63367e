#pragma once
// LoRA through the SGMV contract on the GPU: the semantics of kernels/lora.h (read it first),
// with the slot pool, ranks, scales and segments in device memory. LoRA weights (A, B), the
// shrink output h and all LoRA gradients are fp32; activations x, y, dy, dx are T (float or
// bf16); every dot product accumulates in fp32. Ranks 1..128.
//
// One launch serves all segments of a call (a decode batch of 64 distinct adapters is 64
// one-row segments): the kernel maps each row to its segment on the device. Rows in no segment,
// base-only segments (slot < 0) and rank-0 slots are left untouched (h rows too).
//
// Contract checks (host side, before any launch): max_rank in [1, 128], sizes positive,
// n_segments >= 0. Segment contents (slot range, ordering) are the caller's contract: the GPU
// engine builds them from validated batches.

#include <cstdint>
#include <span>

#include "spindle/kernels/cuda/runtime.h"
#include "spindle/kernels/lora.h"

namespace spindle::kernels::cuda {

class Blas;  // gemm.h

struct DeviceLoraSlots {
  const float* A = nullptr;        // [max_slots, max_rank, d_in]   device
  const float* B = nullptr;        // [max_slots, d_out, max_rank]  device
  const int32_t* rank = nullptr;   // [max_slots]                   device
  const float* scale = nullptr;    // [max_slots]                   device
  int64_t max_slots = 0;
  int64_t max_rank = 0;
  int64_t d_in = 0;
  int64_t d_out = 0;
  // Optional host mirrors of `rank` and `scale` (the same values, as the slot pool keeps them):
  // with DeviceSegments::host they let the backward plan its GEMM path (see below).
  const int32_t* host_rank = nullptr;  // [max_slots] host
  const float* host_scale = nullptr;   // [max_slots] host
};

// Segments of rows (kernels::LoraSegment, in row order, non-overlapping) in device memory.
struct DeviceSegments {
  const LoraSegment* data = nullptr;  // device
  int32_t count = 0;
  int64_t rows = 0;  // total rows of x/h/y covered by the call (>= last segment's row_end)
  const LoraSegment* host = nullptr;  // optional host mirror of data[0, count)
};

// h[t, 0:r_s] = x[t, :] · A_sᵀ.  x: [rows, d_in] stride ld_x; h: [rows, max_rank] dense fp32.
template <class T>
void lora_shrink(const T* x, int64_t ld_x, const DeviceLoraSlots& slots, DeviceSegments segments,
                 float* h, cudaStream_t stream);

// y[t, col_offset + j] += scale_s · Σ_i h[t, i] · B_s[j, i].  y: row stride ld_y.
template <class T>
void lora_expand(const float* h, const DeviceLoraSlots& slots, DeviceSegments segments, T* y,
                 int64_t ld_y, int64_t col_offset, cudaStream_t stream);

// One target of a multi-target SGMV call: several modules applied to the same x (q/k/v,
// gate/up), each with its own slot pool view, h and output window. h: [rows, slots.max_rank]
// dense fp32; y / ld_y / col_offset as lora_expand's (unused by lora_shrink_multi).
template <class T>
struct LoraMultiTarget {
  DeviceLoraSlots slots;
  float* h = nullptr;
  T* y = nullptr;
  int64_t ld_y = 0;
  int64_t col_offset = 0;
};

inline constexpr size_t kLoraMaxTargets = 3;

// lora_shrink / lora_expand for 0..3 targets in one launch, each target's h / y bitwise that of
// its own single-target call. Every target has the same d_in (they share x); the h buffers and
// the y windows of the targets must not overlap each other (or x). Same contract checks as the
// single-target calls, per target, plus targets.size() <= kLoraMaxTargets; no targets = no-op.
template <class T>
void lora_shrink_multi(const T* x, int64_t ld_x, std::span<const LoraMultiTarget<T>> targets,
                       DeviceSegments segments, cudaStream_t stream);
template <class T>
void lora_expand_multi(std::span<const LoraMultiTarget<T>> targets, DeviceSegments segments,
                       cudaStream_t stream);

// Backward, as kernels/lora.h: dh overwritten for adapted rows; dB, dA accumulated (pool
// layout); dx accumulated (dx += dh·A_s) when non-null. Deterministic: the same inputs give
// bitwise-equal outputs run to run (no atomics; cuBLAS is run-to-run reproducible on one GPU).
//
// Two paths, chosen per call on the host (lora_backward_uses_gemm):
// - GEMM (training batches): when `blas` is non-null, the slots carry host_rank/host_scale,
//   the segments carry `host`, and every adapted segment is tall (kernels::plan_lora: at least
//   kLoraGemmMinRows rows), each segment's dh, dB, dA and dx are cuBLAS GEMMs with fp32
//   operands and fp32 accumulation (in bf16 mode the activation rows are widened in row tiles
//   into `scratch`, at most 64 MiB; the LoRA products are bandwidth-bound at rank <= 128, so
//   tensor cores would buy nothing and narrowing h/dh/A/B to bf16 would cost precision). dB/dA
//   accumulate segment by segment (tile by tile) in row order.
// - Kernels (decode-sized segments, or no host mirrors): dh/dx row kernels and a segment-owned
//   reduction for dA/dB; tall calls reduce over row chunks in a fixed order through partial
//   sums in `scratch`.
// `scratch`: caller-owned device memory of at least lora_backward_scratch_bytes<T>(slots,
// segments, with_blas) bytes, with_blas saying whether the calls will pass `blas` (0 for fp32
// GEMM calls and kernel calls of one chunk; scratch may then be null),
// scratch_bytes its size (invalid_argument when too small). The kernels never allocate. Both
// calls of one backward may share the scratch: each is done with it when the next call on the
// stream starts.
bool lora_backward_uses_gemm(const DeviceLoraSlots& slots, const DeviceSegments& segments);
template <class T>
size_t lora_backward_scratch_bytes(const DeviceLoraSlots& slots, const DeviceSegments& segments,
                                   bool with_blas = false);
template <class T>
void lora_expand_backward(const float* h, const T* dy, int64_t ld_dy, int64_t col_offset,
                          const DeviceLoraSlots& slots, DeviceSegments segments, float* dh,
                          float* dB, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                          Blas* blas = nullptr);
template <class T>
void lora_shrink_backward(const T* x, int64_t ld_x, const float* dh, const DeviceLoraSlots& slots,
                          DeviceSegments segments, float* dA, T* dx, int64_t ld_dx, void* scratch,
                          size_t scratch_bytes, cudaStream_t stream, Blas* blas = nullptr);

}  // namespace spindle::kernels::cuda
