#pragma once
// Element types Spindle reads and writes on disk and on the wire. Compute on the CPU is fp32;
// f16/bf16 are converted on load (round-to-nearest-even on store).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace spindle {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8 };

size_t dtype_size(DType dtype);
// Safetensors spelling: "F32", "F16", "BF16", "I32", "I64", "U8".
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float f);

// Converts n elements of a floating dtype (f32, f16, bf16) at src to fp32 at dst.
// src need not be aligned. Throws spindle::Error for non-floating dtypes.
void convert_to_f32(DType src_dtype, const void* src, float* dst, size_t n);
// Converts n fp32 values to dst_dtype (f32, f16, bf16) at dst.
void convert_from_f32(DType dst_dtype, const float* src, void* dst, size_t n);

}  // namespace spindle
