// Token sampling on the GPU (sampling.h). One thread block per row. Thread t of the B-thread
// block owns the elements j = t, t + B, t + 2B, ... (coalesced loads, kUnroll in flight per
// thread); "thread order" below is thread t's elements in increasing j, threads in order.
//
// Per row:
//   1. max and argmax (first index on ties) and the online Σ e^(x−max): the raw logprob;
//      temperature 0 (or not > 0) stops here with the argmax.
//   2. Tempered weights e^((x−max)/T) as fixed-point integers (2^40 = weight 1), so every mass
//      sum is an exact, order-independent integer: the result depends only on the row's logits
//      and (seed, counter), never on thread timing or on the other rows of the batch.
//   3. Candidates in the order (logit desc, index asc) are cut by a radix select on the
//      monotone uint32 key of the logit (four 8-bit passes over a shared histogram of counts or
//      masses, updated once per warp and bin): top-k keeps the first k, top-p then keeps the
//      shortest prefix of those whose mass reaches top_p·total (at least one token). Ties at a
//      cut are taken lowest index first (a second radix select over the tied indices, only
//      when a cut splits a run of equal logits), so a cut is stateless: (key, last index).
//   4. One 64-bit draw from Philox (curand_init(seed, 0, 4·counter)) picks r in [0, total) and
//      the candidate whose cumulative mass in thread order first exceeds r (a fixed permutation
//      of index order for a given vocab).
// Weights below 2^-41 round to zero and are never drawn (a probability below ~1e-12).
// NaN logits give an unspecified token.

#include <curand_kernel.h>

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/sampling.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::block_exclusive_scan;
using detail::block_max_sum;
using detail::MaxSum;
using detail::online_add;
using detail::to_f32;
using u64 = unsigned long long;

constexpr int kThreads = 1024;
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
  float mx;
  float temperature;
};

// Fixed-point tempered weight of logit x (x <= mx, so the weight is <= 2^40 < 2^41).
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

// Calls f(j, valid, x) for this thread's elements in thread order. Every lane of every warp makes
// the same calls (valid is false past the vocabulary), so f may use full-warp intrinsics.
template <class T, class F>
__device__ __forceinline__ void for_each(const T* xr, int64_t vocab, F&& f) {
  const int64_t step = static_cast<int64_t>(blockDim.x);
  for (int64_t base = threadIdx.x; base - threadIdx.x < vocab; base += kUnroll * step) {
    float xs[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = base + u * step;
      xs[u] = j < vocab ? to_f32(xr[j]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = base + u * step;
      f(j, j < vocab, xs[u]);
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

struct Selected {
  uint32_t key;  // the key at which the cumulative measure first reaches target
  u64 above;     // measure of the selected elements with a larger key
  u64 at;        // measure of the selected elements with exactly this key
  u64 target;
};

// Radix select (four 8-bit passes) among the elements with sel(j, x, k) (k = order_key(x)), in
// the order key_of(j, k) desc, of the shortest prefix whose measure reaches target; measure is
// the count (kMass false) or mass_of. target 0: ceil(top_p · total measure), at least 1.
// Requires target <= the total measure.
template <bool kMass, class T, class Sel, class KeyOf>
__device__ Selected radix_select(const T* xr, int64_t vocab, const Row& row, Sel sel,
                                 KeyOf key_of, u64 target, float top_p) {
  __shared__ u64 hist[256];
  __shared__ Selected s_sel;
  uint32_t prefix = 0;
  u64 above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    const uint32_t hi_mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    for_each(xr, vocab, [&](int64_t j, bool valid, float x) {
      const uint32_t k = order_key(x);
      const uint32_t key = key_of(j, k);
      const bool has = valid && sel(j, k) && (key & hi_mask) == (prefix & hi_mask);
      hist_add<kMass>(hist, has, (key >> shift) & 255u,
                      kMass && has ? mass_of(x, row.mx, row.temperature) : 1ull);
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      if (target == 0) {  // first pass of a top-p select: every selected element is counted
        u64 total = 0;
        for (int b = 0; b < 256; ++b) total += hist[b];
        const double want = ceil(static_cast<double>(top_p) * static_cast<double>(total));
        target = want >= static_cast<double>(total) ? total : static_cast<u64>(want);
        if (target < 1) target = 1;
      }
      int b = 255;
      for (; b > 0; --b) {
        if (above + hist[b] >= target) break;
        above += hist[b];
      }
      s_sel = Selected{prefix | (uint32_t(b) << shift), above, hist[b], target};
    }
    __syncthreads();
    prefix = s_sel.key;
    above = s_sel.above;
    target = s_sel.target;
  }
  const Selected out = s_sel;
  __syncthreads();  // s_sel and hist are rewritten by the next call
  return out;
}

// The cut among the elements passing `within` (order: logit desc, index asc) whose prefix is the
// shortest with measure >= target (count or mass; target 0: from top_p, see radix_select).
template <bool kMass, class T>
__device__ Cut radix_cut(const T* xr, int64_t vocab, const Row& row, const Cut& within,
                         u64 target, float top_p) {
  const Selected s = radix_select<kMass>(
      xr, vocab, row, [&](int64_t j, uint32_t k) { return within.pass(k, j); },
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
        xr, vocab, row, [&](int64_t j, uint32_t k) { return k == s.key && within.pass(k, j); },
        [](int64_t j, uint32_t) { return ~static_cast<uint32_t>(j); }, need, 1.0f);
    cut.last = static_cast<int64_t>(~t.key);
  }
  return cut;
}

struct ValIdx {
  float v;
  int64_t i;
};
struct ArgMaxOp {
  __device__ ValIdx operator()(ValIdx a, ValIdx b) const {
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
  }
};

__device__ __forceinline__ ValIdx shfl_xor(ValIdx v, int off) {
  return ValIdx{
      __shfl_xor_sync(kFull, v.v, off),
      static_cast<int64_t>(__shfl_xor_sync(kFull, static_cast<long long>(v.i), off))};
}

__device__ ValIdx block_argmax(ValIdx v) {
  __shared__ ValIdx warp_vals[32];
  __shared__ ValIdx result;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = static_cast<int>(blockDim.x >> 5);
  for (int off = 16; off > 0; off >>= 1) v = ArgMaxOp{}(v, shfl_xor(v, off));
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    ValIdx acc = warp_vals[0];
    for (int i = 1; i < n_warps; ++i) acc = ArgMaxOp{}(acc, warp_vals[i]);
    result = acc;
  }
  __syncthreads();
  const ValIdx out = result;
  __syncthreads();
  return out;
}

// The candidate (passing cut_k and cut_p) whose cumulative mass in thread order first exceeds
// the row's draw; `fallback` when the candidate mass is 0 (NaN logits only).
template <class T>
__device__ int64_t draw_token(const T* xr, int64_t vocab, const Row& row, const Cut& cut_k,
                              const Cut& cut_p, const RowSampling& p, int64_t fallback) {
  __shared__ u64 s_draw;
  __shared__ u64 s_owner_before;
  __shared__ int s_owner;
  __shared__ int64_t s_token;
  const auto mass = [&](int64_t j, float x) {
    const uint32_t k = order_key(x);
    return cut_k.pass(k, j) && cut_p.pass(k, j) ? mass_of(x, row.mx, row.temperature) : 0ull;
  };
  u64 local = 0;
  for_each(xr, vocab, [&](int64_t j, bool valid, float x) {
    if (valid) local += mass(j, x);
  });
  u64 total = 0;
  const u64 before = block_exclusive_scan(local, total);
  if (threadIdx.x == 0) {
    curandStatePhilox4_32_10_t state;
    curand_init(p.seed, /*subsequence=*/0, /*offset=*/p.counter * 4, &state);
    const uint4 bits = curand4(&state);
    const u64 u = (static_cast<u64>(bits.x) << 32) | bits.y;
    s_draw = __umul64hi(u, total);  // uniform in [0, total)
    s_owner = -1;
    s_token = fallback;
  }
  __syncthreads();
  const u64 draw = s_draw;
  if (draw >= before && draw < before + local) {
    s_owner = static_cast<int>(threadIdx.x);
    s_owner_before = before;
  }
  __syncthreads();
  const int owner = s_owner;
  if (owner >= 0) {
    // The owner's elements j = owner + i·B, one per thread (i = chunk + threadIdx.x), scanned in
    // i order: the whole block walks the owner's sequence instead of the owner alone.
    const int64_t step = static_cast<int64_t>(blockDim.x);
    u64 acc = s_owner_before;
    for (int64_t chunk = 0; owner + chunk * step < vocab; chunk += step) {
      const int64_t j = owner + (chunk + threadIdx.x) * step;
      const u64 m = j < vocab ? mass(j, to_f32(xr[j])) : 0ull;
      u64 chunk_total = 0;
      const u64 pre = acc + block_exclusive_scan(m, chunk_total);
      if (m > 0 && draw >= pre && draw < pre + m) s_token = j;
      acc += chunk_total;
    }
  }
  __syncthreads();
  const int64_t token = s_token;
  __syncthreads();  // the shared draw state is rewritten for the next row
  return token;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                  const RowSampling* params, int32_t* tokens, float* logprobs) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * ld;
    const RowSampling p = params[r];

    // 1. max / argmax and the raw log-softmax normaliser, in one pass.
    ValIdx best{-INFINITY, vocab};
    MaxSum ms{-INFINITY, 0.0f};
    for_each(xr, vocab, [&](int64_t j, bool valid, float x) {
      if (!valid) return;
      if (x > best.v || best.i == vocab) best = ValIdx{x, j};
      online_add(ms, x);
    });
    best = block_argmax(best);
    ms = block_max_sum(ms);

    int64_t token = best.i;
    if (p.temperature > 0.0f) {
      Row row;
      row.mx = best.v;
      row.temperature = p.temperature;
      // 3. top-k, then top-p within it.
      Cut cut_k;
      if (p.top_k > 0 && p.top_k < vocab) {
        cut_k = radix_cut<false>(xr, vocab, row, Cut{}, static_cast<u64>(p.top_k), 1.0f);
      }
      Cut cut_p;
      if (p.top_p < 1.0f) cut_p = radix_cut<true>(xr, vocab, row, cut_k, 0, p.top_p);
      // 4. The draw.
      token = draw_token(xr, vocab, row, cut_k, cut_p, p, best.i);
    }
    if (threadIdx.x == 0) {
      tokens[r] = static_cast<int32_t>(token);
      logprobs[r] = (to_f32(xr[token]) - ms.m) - logf(ms.s);
    }
  }
}

}  // namespace

// The in-block design needs no device scratch.
size_t sampling_scratch_bytes(int64_t rows, int64_t vocab) {
  return 0;
}

template <class T>
void sample_tokens(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                   const RowSampling* params, int32_t* tokens, float* logprobs, void* scratch,
                   cudaStream_t stream) {
  constexpr const char* kKernel = "cuda::sample_tokens";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && vocab > 0, kKernel, "rows >= 0 and vocab > 0");
  SPINDLE_KERNEL_REQUIRE(vocab <= INT32_MAX, kKernel, "vocab must fit int32");
  SPINDLE_KERNEL_REQUIRE(ld >= vocab, kKernel, "ld >= vocab");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(
      logits != nullptr && params != nullptr && tokens != nullptr && logprobs != nullptr, kKernel,
      "logits, params, tokens and logprobs must be non-null");
  const unsigned blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  sample_kernel<T>
      <<<blocks, kThreads, 0, stream>>>(logits, ld, rows, vocab, params, tokens, logprobs);
  check_launch(kKernel);
}

template void sample_tokens<float>(const float*, int64_t, int64_t, int64_t, const RowSampling*,
                                   int32_t*, float*, void*, cudaStream_t);
template void sample_tokens<bf16>(const bf16*, int64_t, int64_t, int64_t, const RowSampling*,
                                  int32_t*, float*, void*, cudaStream_t);

}  // namespace spindle::kernels::cuda
