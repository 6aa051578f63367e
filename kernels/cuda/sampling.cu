// Token sampling on the GPU (sampling.h). One thread block per row; each thread owns one
// contiguous chunk of the vocabulary, so "index order" is thread order then chunk order, and a
// block-wide exclusive scan gives every thread its position in it.
//
// Per row:
//   1. max and argmax (first index on ties) and Σ e^(x−max): the raw logprob; temperature 0
//      (or not > 0) stops here with the argmax.
//   2. Tempered weights e^((x−max)/T) as fixed-point integers (2^40 = weight 1), so every mass
//      sum is an exact, order-independent integer: the result depends only on the row's logits
//      and (seed, counter), never on thread timing or on the other rows of the batch.
//   3. Candidates in the order (logit desc, index asc) are cut by a radix select on the
//      monotone uint32 key of the logit (four 8-bit passes over a shared histogram of counts or
//      masses): top-k keeps the first k, top-p then keeps the shortest prefix of those whose mass
//      reaches top_p·total (at least one token). Ties at a cut are taken lowest index first.
//   4. One 64-bit draw from Philox (curand_init(seed, 0, 4·counter)) picks r in [0, total) and
//      the candidate whose cumulative mass (in index order) first exceeds r.
// Weights below 2^-41 round to zero and are never drawn (a probability below ~1e-12).
// NaN logits give an unspecified token.

#include <curand_kernel.h>

#include "pointwise_common.cuh"
#include "spindle/kernels/cuda/sampling.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::block_exclusive_scan;
using detail::block_reduce;
using detail::block_sum;
using detail::to_f32;
using u64 = unsigned long long;

constexpr int kThreads = 512;
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

// Fixed-point tempered weight of logit x (x <= mx, so the weight is <= 1).
__device__ __forceinline__ u64 mass_of(float x, float mx, float temperature) {
  if (x == 0.0f) x = 0.0f;
  const float w = expf((x - mx) / temperature);
  return w > 0.0f ? __float2ull_rn(w * kMassScale) : 0ull;
}

// Elements with key > key pass, and the first `ties` elements (index order) with key == key.
struct Cut {
  bool active = false;  // false: every element passes
  uint32_t key = 0;
  u64 ties = 0;
};

// Walks one thread's chunk in index order; `rank` counts the elements with key == cut.key seen
// so far, starting from the thread's exclusive prefix (tie_base).
struct CutIter {
  Cut cut;
  u64 rank;
  __device__ bool pass(uint32_t k) {
    if (!cut.active || k > cut.key) return true;
    if (k == cut.key) return rank++ < cut.ties;
    return false;
  }
};

struct Row {
  int64_t begin;  // this thread's chunk [begin, end)
  int64_t end;
  float mx;
  float temperature;
};

template <class T>
__device__ uint32_t key_at(const T* xr, int64_t j) {
  return order_key(to_f32(xr[j]));
}

// This thread's number of elements before its chunk whose key equals cut.key.
template <class T>
__device__ u64 tie_base(const T* xr, const Row& row, const Cut& cut) {
  u64 n = 0;
  if (cut.active) {
    for (int64_t j = row.begin; j < row.end; ++j) n += key_at(xr, j) == cut.key ? 1 : 0;
  }
  u64 total = 0;
  return block_exclusive_scan(n, total);
}

// The cut among the elements that pass `within` (order: key desc, index asc) whose prefix is
// the shortest with measure >= target, the measure being the count (kMass false) or the
// fixed-point mass. Requires 1 <= target <= the measure of all elements passing `within`.
template <bool kMass, class T>
__device__ Cut radix_cut(const T* xr, const Row& row, const Cut& within, u64 within_base,
                         u64 target) {
  __shared__ u64 hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ u64 s_above;
  uint32_t prefix = 0;
  u64 above = 0;  // measure of the passing elements with a key above the prefix's range
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    const uint32_t hi_mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    CutIter it{within, within_base};
    for (int64_t j = row.begin; j < row.end; ++j) {
      const float x = to_f32(xr[j]);
      const uint32_t k = order_key(x);
      if (!it.pass(k) || (k & hi_mask) != (prefix & hi_mask)) continue;
      atomicAdd(&hist[(k >> shift) & 255u], kMass ? mass_of(x, row.mx, row.temperature) : 1ull);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int b = 255;
      for (; b > 0; --b) {
        if (above + hist[b] >= target) break;
        above += hist[b];
      }
      s_prefix = prefix | (uint32_t(b) << shift);
      s_above = above;
    }
    __syncthreads();
    prefix = s_prefix;
    above = s_above;
  }
  Cut cut;
  cut.active = true;
  cut.key = prefix;
  const u64 rem = target - above;  // > 0, carried by elements whose key is exactly `prefix`
  if (kMass) {
    const u64 m = mass_of(key_value(prefix), row.mx, row.temperature);
    cut.ties = m == 0 ? ~0ull : (rem + m - 1) / m;
  } else {
    cut.ties = rem;
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
      __shfl_xor_sync(0xffffffffu, v.v, off),
      static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v.i), off))};
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

template <class T>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                  const RowSampling* params, int32_t* tokens, float* logprobs) {
  __shared__ u64 s_draw;
  __shared__ int64_t s_token;
  const int64_t chunk = (vocab + blockDim.x - 1) / blockDim.x;
  Row row;
  row.begin = threadIdx.x * chunk < vocab ? threadIdx.x * chunk : vocab;
  row.end = row.begin + chunk < vocab ? row.begin + chunk : vocab;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * ld;
    const RowSampling p = params[r];

    // 1. max / argmax and the raw log-softmax normaliser.
    ValIdx best{-INFINITY, vocab};
    for (int64_t j = row.begin; j < row.end; ++j) {
      const float x = to_f32(xr[j]);
      if (x > best.v || best.i == vocab) best = ValIdx{x, j};
    }
    best = block_argmax(best);
    row.mx = best.v;
    float sum = 0.0f;
    for (int64_t j = row.begin; j < row.end; ++j) sum += expf(to_f32(xr[j]) - row.mx);
    sum = block_sum(sum);

    int64_t token = best.i;
    if (p.temperature > 0.0f) {
      row.temperature = p.temperature;
      // 3. top-k, then top-p within it.
      Cut cut_k;
      if (p.top_k > 0 && p.top_k < vocab) {
        cut_k = radix_cut<false>(xr, row, Cut{}, 0, static_cast<u64>(p.top_k));
      }
      const u64 base_k = tie_base(xr, row, cut_k);
      Cut cut_p;
      if (p.top_p < 1.0f) {
        u64 local = 0;
        CutIter it{cut_k, base_k};
        for (int64_t j = row.begin; j < row.end; ++j) {
          const float x = to_f32(xr[j]);
          if (it.pass(order_key(x))) local += mass_of(x, row.mx, row.temperature);
        }
        const u64 total = block_sum(local);
        const double want = ceil(static_cast<double>(p.top_p) * static_cast<double>(total));
        u64 target = want >= static_cast<double>(total) ? total : static_cast<u64>(want);
        if (target < 1) target = 1;
        cut_p = radix_cut<true>(xr, row, cut_k, base_k, target);
      }
      const u64 base_p = tie_base(xr, row, cut_p);

      // 4. The draw: cumulative candidate mass in index order.
      u64 local = 0;
      {
        CutIter ik{cut_k, base_k};
        CutIter ip{cut_p, base_p};
        for (int64_t j = row.begin; j < row.end; ++j) {
          const float x = to_f32(xr[j]);
          const uint32_t k = order_key(x);
          const bool a = ik.pass(k);
          const bool b = ip.pass(k);
          if (a && b) local += mass_of(x, row.mx, row.temperature);
        }
      }
      u64 total = 0;
      const u64 before = block_exclusive_scan(local, total);
      if (threadIdx.x == 0) {
        curandStatePhilox4_32_10_t state;
        curand_init(p.seed, /*subsequence=*/0, /*offset=*/p.counter * 4, &state);
        const uint4 bits = curand4(&state);
        const u64 u = (static_cast<u64>(bits.x) << 32) | bits.y;
        s_draw = __umul64hi(u, total);  // uniform in [0, total)
        s_token = best.i;               // fallback: total == 0 cannot happen (max has 2^40)
      }
      __syncthreads();
      const u64 draw = s_draw;
      if (draw >= before && draw < before + local) {
        CutIter ik{cut_k, base_k};
        CutIter ip{cut_p, base_p};
        u64 acc = before;
        for (int64_t j = row.begin; j < row.end; ++j) {
          const float x = to_f32(xr[j]);
          const uint32_t k = order_key(x);
          const bool a = ik.pass(k);
          const bool b = ip.pass(k);
          if (!(a && b)) continue;
          acc += mass_of(x, row.mx, row.temperature);
          if (draw < acc) {
            s_token = j;
            break;
          }
        }
      }
      __syncthreads();
      token = s_token;
      __syncthreads();  // s_token / s_draw are rewritten for the next row
    }
    if (threadIdx.x == 0) {
      tokens[r] = static_cast<int32_t>(token);
      logprobs[r] = (to_f32(xr[token]) - row.mx) - logf(sum);
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
