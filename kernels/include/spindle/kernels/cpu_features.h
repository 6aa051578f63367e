#pragma once
// Which vector instruction set the CPU kernels use. The library is built for baseline x86-64;
// AVX2+FMA and AVX-512 code paths are picked once, at first use, from what the CPU reports
// (__builtin_cpu_supports). Every path computes the same contract; float sums may be ordered
// differently, so results agree to rounding, not bit for bit.

#include <cstdint>

namespace spindle::kernels {

enum class SimdLevel : uint8_t { scalar, avx2, avx512 };

// The level the kernels use now.
SimdLevel simd_level() noexcept;
// The best level this CPU supports.
SimdLevel simd_level_detected() noexcept;
const char* simd_level_name(SimdLevel level) noexcept;

// Tests only: forces a level, clamped to simd_level_detected(); returns the level now in use.
// Not synchronised with kernels running on other threads: call it between kernel calls.
SimdLevel set_simd_level_for_testing(SimdLevel level) noexcept;

}  // namespace spindle::kernels
