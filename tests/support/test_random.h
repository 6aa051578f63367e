#pragma once
// Seeded random test data shared by the CPU kernel tests and the GPU tests.

#include <cstdint>
#include <random>
#include <vector>

namespace spindle::test {

// n values uniform in [lo, hi) from mt19937(seed): the same seed gives the same data everywhere.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace spindle::test
