#pragma once
// Exact selection machinery of sample_tokens (sampling.cu), run by one thread block over a
// Source: a sequence of n elements (vocabulary index, logit) in increasing vocabulary index —
// a whole row in global memory, or a row's candidates gathered into shared memory.
//
// Masses are tempered weights e^((x−max)/T) as fixed-point integers (2^40 = weight 1), so every
// sum is an exact, order-independent integer. Candidates are ordered (logit desc, index asc);
// radix_cut finds the shortest prefix whose count or mass reaches a target (four 8-bit passes
// over a shared histogram, updated once per warp and bin), ties at the cut taken lowest index
// first; draw_token picks the element whose cumulative mass in index order first exceeds one
// Philox draw. Elements of zero mass never change a mass cut or a draw, so any Source holding
// every nonzero-mass element of the row (plus possibly zero-mass ones) gives the same cuts'
// masses and the same drawn token as the whole row (see sampling.cu for the top-k argument).
//
// Every function here is called by every thread of the block (they synchronise); blockDim.x is
// a multiple of 32, at most 1024.

#include <curand_kernel.h>

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/sampling.h"

namespace spindle::kernels::cuda::detail::sampling {

using u64 = unsigned long long;

constexpr int kUnroll = 8;  // loads in flight per thread
constexpr unsigned kFull = 0xffffffffu;
constexpr float kMassScale = 1099511627776.0f;  // 2^40: fixed-point weight of the row's max

// Monotone map float -> uint32 (larger float, larger key); -0 and +0 share one key.
__device__ __forceinline__ uint32_t order_key(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct Row {
  float mx;  // the row's max logit
  float temperature;
};

// Fixed-point tempered weight of logit x (x <= mx, so the weight is <= 2^40 < 2^41). Zero for
// (x − mx)/T below about −28.42 (weight < 2^-41).
__device__ __forceinline__ u64 mass_of(float x, float mx, float temperature) {
  if (x == 0.0f) x = 0.0f;
  const float w = expf((x - mx) / temperature);
  return w > 0.0f ? __float2ull_rn(w * kMassScale) : 0ull;
}

// Elements with key > key pass, and those with key == key and index <= last.
struct Cut {
  bool active = false;  // false: every element passes
  uint32_t key = 0;
  int64_t last = INT64_MAX;
  __device__ bool pass(uint32_t k, int64_t j) const {
    return !active || k > key || (k == key && j <= last);
  }
};

// A whole row in global memory: element i is vocabulary index i.
template <class T>
struct RowSource {
  const T* xr;
  int64_t n;
  __device__ int64_t index(int64_t i) const { return i; }
  __device__ float value(int64_t i) const { return to_f32(xr[i]); }
};

// Elements in shared memory: index base + i (idx == nullptr) or idx[i], increasing in i.
struct SharedSource {
  const float* x;
  const int32_t* idx;
  int64_t base;
  int64_t n;
  __device__ int64_t index(int64_t i) const { return idx ? int64_t(idx[i]) : base + i; }
  __device__ float value(int64_t i) const { return x[i]; }
};

// Calls f(j, valid, x) for this thread's elements i = t, t + B, ... Every lane of every warp
// makes the same calls (valid is false past n), so f may use full-warp intrinsics.
template <class Src, class F>
__device__ __forceinline__ void for_each(const Src& src, F&& f) {
  const int64_t step = static_cast<int64_t>(blockDim.x);
  for (int64_t base = threadIdx.x; base - threadIdx.x < src.n; base += kUnroll * step) {
    float xs[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      xs[u] = i < src.n ? src.value(i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      const bool valid = i < src.n;
      f(valid ? src.index(i) : int64_t{0}, valid, xs[u]);
    }
  }
}

// hist[bin] += value over the lanes with `has`, one shared atomic per (warp, bin). Called by
// every lane of the warp. Masses are < 2^41, so the 24-bit halves of 32 lanes fit 32 bits.
template <bool kMass>
__device__ __forceinline__ void hist_add(u64* hist, bool has, uint32_t bin, u64 value) {
  const unsigned active = __ballot_sync(kFull, has);
  if (active == 0) return;
  // Common case first: every participating lane has the same bin (no match needed).
  const uint32_t lead_bin = __shfl_sync(kFull, bin, __ffs(active) - 1);
  const unsigned same = __ballot_sync(kFull, has && bin == lead_bin);
  const unsigned group =
      same == active ? active : __match_any_sync(kFull, has ? bin : 0xffffffffu);
  if (!has) return;
  u64 add;
  if (kMass) {
    const unsigned lo = __reduce_add_sync(group, static_cast<unsigned>(value & 0xffffffull));
    const unsigned hi = __reduce_add_sync(group, static_cast<unsigned>(value >> 24));
    add = (static_cast<u64>(hi) << 24) + lo;
  } else {
    add = static_cast<u64>(__popc(group));
  }
  if ((threadIdx.x & 31) == static_cast<unsigned>(__ffs(group) - 1)) atomicAdd(&hist[bin], add);
}

__device__ __forceinline__ u64 warp_inclusive_scan(u64 v) {
  const int lane = threadIdx.x & 31;
  for (int off = 1; off < 32; off <<= 1) {
    const u64 up = __shfl_up_sync(kFull, v, off);
    if (lane >= off) v += up;
  }
  return v;
}

struct Selected {
  uint32_t key;  // the key at which the cumulative measure first reaches target
  u64 above;     // measure of the selected elements with a larger key
  u64 at;        // measure of the selected elements with exactly this key
  u64 target;
};

// Block-shared state of the selection; one instance per kernel, passed to every call.
struct SelectShared {
  u64 hist[256];
  Selected sel;
  u64 draw;
  u64 owner_before;
  int owner;
  int64_t token;
};

// Warp 0 only: the highest bin at which `above` plus the bins above it reach target (bin 0 if
// none), written to sh.sel. target 0: ceil(top_p · Σ hist), at least 1.
__device__ __forceinline__ void pick_bin(SelectShared& sh, uint32_t prefix, int shift, u64 above,
                                         u64 target, float top_p) {
  const int lane = threadIdx.x & 31;
  u64 bins[8];  // lane l owns bins 255 − 8l − u, u = 0..7 (descending)
  u64 lane_sum = 0;
#pragma unroll
  for (int u = 0; u < 8; ++u) lane_sum += bins[u] = sh.hist[255 - 8 * lane - u];
  if (target == 0) {
    u64 total = lane_sum;
    for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(kFull, total, off);
    const double want = ceil(static_cast<double>(top_p) * static_cast<double>(total));
    target = want >= static_cast<double>(total) ? total : static_cast<u64>(want);
    if (target < 1) target = 1;
  }
  const u64 incl = warp_inclusive_scan(lane_sum);
  const unsigned hit = __ballot_sync(kFull, above + incl >= target);
  const int chosen = hit ? __ffs(hit) - 1 : 31;
  if (lane == chosen) {
    u64 a = above + incl - lane_sum;
    int u = 0;
    for (; u < 7; ++u) {
      if (a + bins[u] >= target) break;
      a += bins[u];
    }
    sh.sel = Selected{prefix | (uint32_t(255 - 8 * lane - u) << shift), a, bins[u], target};
  }
}

// Radix select (four 8-bit passes) among the elements with sel(j, k) (k = order_key(x)), in the
// order key_of(j, k) desc, of the shortest prefix whose measure reaches target; measure is the
// count (kMass false) or mass_of. target 0: ceil(top_p · total measure), at least 1.
// Requires target <= the total measure.
template <bool kMass, class Src, class Sel, class KeyOf>
__device__ Selected radix_select(SelectShared& sh, const Src& src, const Row& row, Sel sel,
                                 KeyOf key_of, u64 target, float top_p) {
  uint32_t prefix = 0;
  u64 above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    const uint32_t hi_mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    for_each(src, [&](int64_t j, bool valid, float x) {
      const uint32_t k = order_key(x);
      const uint32_t key = key_of(j, k);
      const bool has = valid && sel(j, k) && (key & hi_mask) == (prefix & hi_mask);
      hist_add<kMass>(sh.hist, has, (key >> shift) & 255u,
                      kMass && has ? mass_of(x, row.mx, row.temperature) : 1ull);
    });
    __syncthreads();
    if (threadIdx.x < 32) pick_bin(sh, prefix, shift, above, target, top_p);
    __syncthreads();
    prefix = sh.sel.key;
    above = sh.sel.above;
    target = sh.sel.target;
  }
  const Selected out = sh.sel;
  __syncthreads();  // sel and hist are rewritten by the next call
  return out;
}

// The cut among the elements passing `within` (order: logit desc, index asc) whose prefix is the
// shortest with measure >= target (count or mass; target 0: from top_p, see radix_select).
template <bool kMass, class Src>
__device__ Cut radix_cut(SelectShared& sh, const Src& src, const Row& row, const Cut& within,
                         u64 target, float top_p) {
  const Selected s = radix_select<kMass>(
      sh, src, row, [&](int64_t j, uint32_t k) { return within.pass(k, j); },
      [](int64_t, uint32_t k) { return k; }, target, top_p);
  Cut cut;
  cut.active = true;
  cut.key = s.key;
  const u64 rem = s.target - s.above;  // > 0, carried by elements whose key is exactly s.key
  u64 need = rem;                      // tied elements needed, lowest index first
  u64 tied = s.at;                     // tied elements available
  if (kMass) {
    const u64 m = mass_of(key_value(s.key), row.mx, row.temperature);
    need = m == 0 ? ~0ull : (rem + m - 1) / m;
    tied = m == 0 ? 0ull : s.at / m;
  }
  if (need < tied) {  // the cut splits a run of equal logits: select the need-th lowest index
    const Selected t = radix_select<false>(
        sh, src, row,
        [&](int64_t j, uint32_t k) { return k == s.key && within.pass(k, j); },
        [](int64_t j, uint32_t) { return ~static_cast<uint32_t>(j); }, need, 1.0f);
    cut.last = static_cast<int64_t>(~t.key);
  }
  return cut;
}

// The element passing cut_k and cut_p whose cumulative mass in index order first exceeds the
// draw r = ⌊u · total / 2^64⌋ (u: 64 bits of Philox, curand_init(seed, 0, 4·counter)), so
// r is uniform in [0, total); `fallback` when the candidate mass is 0 (NaN logits only).
// Warp w owns the contiguous elements [w·seg, (w+1)·seg) (coalesced within the warp).
template <class Src>
__device__ int64_t draw_token(SelectShared& sh, const Src& src, const Row& row, const Cut& cut_k,
                              const Cut& cut_p, const RowSampling& p, int64_t fallback) {
  const auto mass = [&](int64_t i) {
    const float x = src.value(i);
    const uint32_t k = order_key(x);
    return cut_k.pass(k, src.index(i)) && cut_p.pass(k, src.index(i))
               ? mass_of(x, row.mx, row.temperature)
               : 0ull;
  };
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warp = threadIdx.x >> 5;
  const int64_t n_warps = blockDim.x >> 5;
  const int64_t seg = (src.n + 32 * n_warps - 1) / (32 * n_warps) * 32;
  const int64_t begin = warp * seg;
  const int64_t end = begin + seg < src.n ? begin + seg : src.n;
  u64 local = 0;
#pragma unroll 4
  for (int64_t i = begin + lane; i < end; i += 32) local += mass(i);
  for (int off = 16; off > 0; off >>= 1) local += __shfl_xor_sync(kFull, local, off);
  u64 total = 0;
  const u64 before = __shfl_sync(kFull, block_exclusive_scan(lane == 0 ? local : 0ull, total), 0);
  if (threadIdx.x == 0) {
    curandStatePhilox4_32_10_t state;
    curand_init(p.seed, /*subsequence=*/0, /*offset=*/p.counter * 4, &state);
    const uint4 bits = curand4(&state);
    const u64 u = (static_cast<u64>(bits.x) << 32) | bits.y;
    sh.draw = __umul64hi(u, total);  // uniform in [0, total)
    sh.owner = -1;
    sh.token = fallback;
  }
  __syncthreads();
  const u64 draw = sh.draw;
  if (lane == 0 && local > 0 && draw >= before && draw < before + local) {
    sh.owner = static_cast<int>(warp);
    sh.owner_before = before;
  }
  __syncthreads();
  if (sh.owner == warp) {  // the owner warp walks its segment, kUnroll·32 loads in flight
    u64 acc = sh.owner_before;
    for (int64_t b = begin; b < end && acc <= draw; b += 32 * kUnroll) {
      u64 m[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = b + 32 * u + lane;
        m[u] = i < end ? mass(i) : 0ull;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const u64 incl = warp_inclusive_scan(m[u]);
        const u64 pre = acc + incl - m[u];
        if (m[u] > 0 && draw >= pre && draw < pre + m[u]) sh.token = src.index(b + 32 * u + lane);
        acc += __shfl_sync(kFull, incl, 31);
      }
    }
  }
  __syncthreads();
  const int64_t token = sh.token;
  __syncthreads();  // the shared draw state is rewritten for the next row
  return token;
}

}  // namespace spindle::kernels::cuda::detail::sampling
