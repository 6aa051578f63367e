#include "spindle/core/dtype.h"

#include "spindle/core/error.h"

namespace spindle {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "I32") return DType::i32;
  if (name == "I64") return DType::i64;
  if (name == "U8") return DType::u8;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (incl. rounding) -> inf
  if (absx < 0x33000001u) return sign;                      // underflow to zero
  int exp = int(absx >> 23) - 127 + 15;
  uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
  if (exp <= 0) {  // subnormal half
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = (uint32_t(exp) << 10) | ((mant >> 13) & 0x3ffu);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
  return uint16_t(sign | half);
}

void convert_to_f32(DType src_dtype, const void* src, float* dst, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(src);
  switch (src_dtype) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, bytes + 2 * i, 2);
        dst[i] = bf16_to_f32(b);
      }
      return;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, bytes + 2 * i, 2);
        dst[i] = f16_to_f32(b);
      }
      return;
    default:
      SPINDLE_THROW(unsupported, "cannot convert dtype {} to F32 (floating dtypes only)",
                    dtype_name(src_dtype));
  }
}

void convert_from_f32(DType dst_dtype, const float* src, void* dst, size_t n) {
  auto* bytes = static_cast<unsigned char*>(dst);
  switch (dst_dtype) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t b = f32_to_bf16(src[i]);
        std::memcpy(bytes + 2 * i, &b, 2);
      }
      return;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t b = f32_to_f16(src[i]);
        std::memcpy(bytes + 2 * i, &b, 2);
      }
      return;
    default:
      SPINDLE_THROW(unsupported, "cannot convert F32 to dtype {} (floating dtypes only)",
                    dtype_name(dst_dtype));
  }
}

}  // namespace spindle
