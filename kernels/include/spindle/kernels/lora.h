#pragma once
// LoRA through the SGMV contract (Punica / S-LoRA): the rows of a batch are grouped into
// segments of consecutive rows that use one adapter slot; every slot has its own rank.
//
//   shrink: h[t, 0:r_s]  = x[t, :] · A_sᵀ                  A_s = [r_s, d_in]
//   expand: y[t, off + j] += scale_s · Σ_i h[t, i] · B_s[j, i]  B_s = [d_out, r_s]
//
// so y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ with the base GEMM done once for all rows. Slot storage is a fixed
// pool for one (layer, module): A = [max_slots, max_rank, d_in], B = [max_slots, d_out·max_rank];
// a slot of rank r_s uses A rows [0, r_s), and B_s = [d_out, r_s] row-major packed at the start
// of its slot's d_out·max_rank floats (row stride r_s, not max_rank: slot_b). A rank-r adapter's
// B, as PEFT stores it, is thus one contiguous copy into a slot, and its rows are read without
// striding over unused columns. Rank 0 = module not adapted in that slot (the segment is
// skipped). Segments with slot < 0 (base only) are skipped.
// Segments are in row order and do not overlap (empty segments and rows in no segment are
// allowed; such rows are left untouched). All checks run before any write.

#include <cstdint>
#include <span>

namespace spindle::kernels {

struct LoraSegment {
  int64_t row_begin = 0;  // rows [row_begin, row_end) of x / h / y
  int64_t row_end = 0;
  int32_t slot = -1;
};

struct LoraSlots {
  const float* A = nullptr;      // [max_slots, max_rank, d_in]
  const float* B = nullptr;      // [max_slots, d_out·max_rank]: B_s = [d_out, r_s] packed
  const int32_t* rank = nullptr;  // [max_slots], 0 <= rank <= max_rank
  const float* scale = nullptr;  // [max_slots]
  int64_t max_slots = 0;
  int64_t max_rank = 0;
  int64_t d_in = 0;
  int64_t d_out = 0;
};

// Where slot s's B_s = [d_out, r_s] (row stride r_s) starts in a B-shaped pool (B or dB).
template <class F>
F* slot_b(F* b, const LoraSlots& slots, int64_t slot) {
  return b + slot * slots.d_out * slots.max_rank;
}

// x: [T, d_in] row stride ld_x; h: [T, max_rank] dense. Writes h[t, 0:r_s] for adapted rows.
void lora_shrink(const float* x, int64_t ld_x, const LoraSlots& slots,
                 std::span<const LoraSegment> segments, float* h);

// h: [T, max_rank] dense; y: row stride ld_y; adds into columns [col_offset, col_offset + d_out).
void lora_expand(const float* h, const LoraSlots& slots, std::span<const LoraSegment> segments,
                 float* y, int64_t ld_y, int64_t col_offset);

// Backward of the SGMV pair, for the adapted rows of each segment (slot s, rank r_s, scale c_s):
//   expand backward: dh[t, 0:r_s] = c_s · dy[t, off:off+d_out] · B_s        (overwritten)
//                    dB[s] += c_s · Σ_t dy[t]ᵀ ⊗ h[t, 0:r_s]                 [d_out, r_s]
//   shrink backward: dA[s] += Σ_t dh[t, 0:r_s]ᵀ ⊗ x[t]                      [r_s, d_in]
//                    dx[t] += dh[t, 0:r_s] · A_s                           (if dx non-null)
// h and dh: [T, max_rank] dense (h from lora_shrink of the same x). dA, dB use the pool layout
// of slots.A / slots.B ([max_slots, max_rank, d_in]; dB_s = [d_out, r_s] packed, slot_b) and are
// accumulated (several backward calls may precede an optimizer step).
void lora_expand_backward(const float* h, const float* dy, int64_t ld_dy, int64_t col_offset,
                          const LoraSlots& slots, std::span<const LoraSegment> segments,
                          float* dh, float* dB);
void lora_shrink_backward(const float* x, int64_t ld_x, const float* dh, const LoraSlots& slots,
                          std::span<const LoraSegment> segments, float* dA, float* dx,
                          int64_t ld_dx);

}  // namespace spindle::kernels
