// Token sampling on the GPU (sampling.h), in two kernels over one row of logits each:
//
//   1. prefilter_kernel, one block per (chunk of kChunk logits, row): the chunk's max / first
//      argmax / Σ e^(x−max) (the raw logprob's normaliser, combined later in chunk order), and,
//      for sampled rows, the chunk's candidates — the elements in the chunk's own top-k (when
//      top_k is set) whose tempered weight may be nonzero, (x − chunk max)/T >= kAliveLogWeight —
//      appended in index order to the row's candidate buffer (space reserved with an atomic,
//      positions recorded per chunk, so the gathered order below is deterministic).
//   2. sample_kernel, one block per row: combines the chunk statistics in chunk order
//      (temperature 0, or not > 0, stops here with the argmax); gathers the candidates into
//      shared memory in index order when they fit (at most kMaxCandidates), else works on the
//      whole row (the full-row path); then the exact selection of sampling_select.cuh: top-k,
//      top-p within it, one draw.
//
// Why the candidates give exactly the full-row result. Let G be the row's top-k (order: logit
// desc, index asc). An element of G is in its chunk's top-k, and a nonzero-mass element passes
// the weight test (the chunk max is <= the row max, and mass_of is zero below −28.42), so the
// candidates C hold every nonzero-mass element of G (of the row, without top-k). Elements of C
// outside G rank below an element of G missing from C, which has zero mass, so they have zero
// mass too. Zero-mass elements change neither a mass cut nor the draw, and the top-k cut of C
// (none when |C| <= k) keeps the nonzero-mass elements of G. So the top-p cut and the drawn
// token are the same as over the whole row; the draw walks cumulative mass in index order on
// both paths. Tokens and logprobs are a function of (row, seed, counter) only.
// Weights below 2^-41 round to zero and are never drawn (a probability below ~1e-12).
// NaN logits give an unspecified token.

#include "sampling_select.cuh"
#include "spindle/kernels/cuda/sampling.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

using detail::block_exclusive_scan;
using detail::block_max_sum;
using detail::combine;
using detail::MaxSum;
using detail::online_add;
using detail::to_f32;
using namespace detail::sampling;

constexpr int kThreads = 1024;        // sample_kernel
constexpr int kChunkThreads = 256;    // prefilter_kernel
constexpr int kChunk = 2048;          // logits per prefilter block
constexpr int kPerThread = kChunk / kChunkThreads;
constexpr int kMaxCandidates = 4096;  // per row, gathered into shared memory
constexpr int kMaxChunks = 512;       // vocab <= 1 Mi for the prefilter; else the full row
constexpr float kAliveLogWeight = -29.0f;  // below −28.42 every weight rounds to 0

// Per (row, chunk) statistics and the chunk's slice of the row's candidate buffer.
struct ChunkStats {
  float m;       // chunk max
  float s;       // Σ e^(x − m)
  float best_v;  // max and first index at it
  int32_t best_i;
  uint32_t off;  // candidates at [off, off + cnt) of the row's buffer (off + cnt <= capacity)
  uint32_t cnt;
};
struct Candidate {
  float x;
  int32_t j;
};

// Scratch: counters [rows] (candidates reserved per row), stats [rows, chunks], candidates
// [rows, kMaxCandidates].
struct Scratch {
  uint32_t* counters;
  ChunkStats* stats;
  Candidate* cands;
};

constexpr size_t align_up(size_t n) {
  return (n + 255) / 256 * 256;
}
int64_t chunks_of(int64_t vocab) {
  return (vocab + kChunk - 1) / kChunk;
}
Scratch carve(void* scratch, int64_t rows, int64_t vocab) {
  auto* base = static_cast<unsigned char*>(scratch);
  const size_t counters = align_up(size_t(rows) * sizeof(uint32_t));
  const size_t stats = align_up(size_t(rows * chunks_of(vocab)) * sizeof(ChunkStats));
  return Scratch{reinterpret_cast<uint32_t*>(base), reinterpret_cast<ChunkStats*>(base + counters),
                 reinterpret_cast<Candidate*>(base + counters + stats)};
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

template <class T>
__global__ void __launch_bounds__(kChunkThreads)
    prefilter_kernel(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                     const RowSampling* params, Scratch sc, bool prefilter) {
  __shared__ float s_x[kChunk];
  __shared__ SelectShared sh;
  __shared__ uint32_t s_off;
  const int64_t n_chunks = gridDim.x;
  const int64_t c = blockIdx.x;
  const int64_t begin = c * kChunk;
  const int64_t len = vocab - begin < kChunk ? vocab - begin : kChunk;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    __syncthreads();  // s_x of the previous row is no longer read
    const T* xr = logits + r * ld + begin;
    ValIdx best{-INFINITY, vocab};
    MaxSum ms{-INFINITY, 0.0f};
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float x = to_f32(xr[i]);
      s_x[i] = x;
      if (x > best.v || best.i == vocab) best = ValIdx{x, begin + i};
      online_add(ms, x);
    }
    best = block_argmax(best);  // synchronises: s_x is complete after this
    ms = block_max_sum(ms);
    ChunkStats* st = sc.stats + r * n_chunks + c;
    if (threadIdx.x == 0) {
      st->m = ms.m;
      st->s = ms.s;
      st->best_v = best.v;
      st->best_i = static_cast<int32_t>(best.i);
      st->off = 0;
      st->cnt = 0;
    }
    const RowSampling p = params[r];
    if (!prefilter || !(p.temperature > 0.0f)) continue;

    const float lmx = best.v;
    const float temperature = p.temperature;
    const auto alive = [&](float x) { return (x - lmx) / temperature >= kAliveLogWeight; };
    const SharedSource src{s_x, nullptr, begin, len};
    Cut cut;
    if (p.top_k > 0 && p.top_k < len) {
      u64 n_alive = 0;
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x) n_alive += alive(s_x[i]) ? 1 : 0;
      n_alive = detail::block_sum(n_alive);
      // The alive elements lead the chunk's order: with at most k of them, all are in its top-k.
      if (n_alive > static_cast<u64>(p.top_k)) {
        cut = radix_cut<false>(sh, src, Row{lmx, temperature}, Cut{},
                               static_cast<u64>(p.top_k), 1.0f);
      }
    }
    // Thread t owns the contiguous elements [t·kPerThread, (t+1)·kPerThread): thread order is
    // index order, so the exclusive scan gives each candidate's place in the chunk's list.
    const int64_t mine = threadIdx.x * kPerThread;
    const auto is_candidate = [&](int64_t i) {
      const float x = s_x[i];
      return alive(x) && cut.pass(order_key(x), begin + i);
    };
    u64 local = 0;
    for (int64_t i = mine; i < mine + kPerThread && i < len; ++i) local += is_candidate(i);
    u64 total = 0;
    const u64 before = block_exclusive_scan(local, total);
    if (threadIdx.x == 0) {
      const uint32_t off = atomicAdd(sc.counters + r, static_cast<uint32_t>(total));
      s_off = off;
      st->off = off;
      st->cnt = static_cast<uint32_t>(total);
    }
    __syncthreads();
    const uint64_t off = s_off;
    if (off + total <= static_cast<uint64_t>(kMaxCandidates)) {  // else the row overflows
      Candidate* out = sc.cands + r * kMaxCandidates + off + before;
      for (int64_t i = mine; i < mine + kPerThread && i < len; ++i) {
        if (is_candidate(i)) *out++ = Candidate{s_x[i], static_cast<int32_t>(begin + i)};
      }
    }
  }
}

// The row's statistics, combined over its chunks in a fixed order (lane l folds chunks l,
// l + 32, ... in order, then a fixed tree). Warp 0 only; lane 0 holds the result.
__device__ void combine_chunks(const ChunkStats* st, int64_t n_chunks, MaxSum& ms, ValIdx& best) {
  ms = MaxSum{-INFINITY, 0.0f};
  best = ValIdx{INFINITY, INT64_MAX};
  bool any = false;
  for (int64_t c = threadIdx.x; c < n_chunks; c += 32) {
    const ChunkStats s = st[c];
    ms = combine(ms, MaxSum{s.m, s.s});
    const ValIdx b{s.best_v, s.best_i};
    best = any ? ArgMaxOp{}(best, b) : b;
    any = true;
  }
  for (int off = 16; off > 0; off >>= 1) {
    const MaxSum o{__shfl_xor_sync(kFull, ms.m, off), __shfl_xor_sync(kFull, ms.s, off)};
    const ValIdx ob = shfl_xor(best, off);
    const bool other_any = __shfl_xor_sync(kFull, any, off);
    ms = combine(ms, o);
    if (!any) best = ob;
    else if (other_any) best = ArgMaxOp{}(best, ob);
    any = any || other_any;
  }
}

template <class Src>
__device__ int64_t select_and_draw(SelectShared& sh, const Src& src, const Row& row,
                                   const RowSampling& p, int64_t fallback) {
  Cut cut_k;
  if (p.top_k > 0 && p.top_k < src.n) {
    cut_k = radix_cut<false>(sh, src, row, Cut{}, static_cast<u64>(p.top_k), 1.0f);
  }
  Cut cut_p;
  if (p.top_p < 1.0f) cut_p = radix_cut<true>(sh, src, row, cut_k, 0, p.top_p);
  return draw_token(sh, src, row, cut_k, cut_p, p, fallback);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const T* logits, int64_t ld, int64_t rows, int64_t vocab, int64_t n_chunks,
                  const RowSampling* params, Scratch sc, bool prefilter, int32_t* tokens,
                  float* logprobs) {
  __shared__ float s_x[kMaxCandidates];
  __shared__ int32_t s_j[kMaxCandidates];
  __shared__ uint32_t s_dest[kMaxChunks];
  __shared__ SelectShared sh;
  __shared__ MaxSum s_ms;
  __shared__ ValIdx s_best;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * ld;
    const RowSampling p = params[r];
    const ChunkStats* st = sc.stats + r * n_chunks;
    if (threadIdx.x < 32) {
      MaxSum ms;
      ValIdx best;
      combine_chunks(st, n_chunks, ms, best);
      if (threadIdx.x == 0) {
        s_ms = ms;
        s_best = best;
      }
    }
    __syncthreads();
    const MaxSum ms = s_ms;
    const ValIdx best = s_best;
    int64_t token = best.i;
    if (p.temperature > 0.0f) {
      const Row row{best.v, p.temperature};
      const uint32_t n = prefilter ? sc.counters[r] : ~0u;
      if (n <= static_cast<uint32_t>(kMaxCandidates)) {
        // Gather in chunk order (= index order): chunk c's list lands at s_dest[c].
        if (threadIdx.x < 32) {
          uint32_t run = 0;
          for (int64_t c0 = 0; c0 < n_chunks; c0 += 32) {
            const int64_t c = c0 + threadIdx.x;
            const uint32_t cnt = c < n_chunks ? st[c].cnt : 0u;
            const uint32_t incl = static_cast<uint32_t>(warp_inclusive_scan(cnt));
            if (c < n_chunks) s_dest[c] = run + incl - cnt;
            run += __shfl_sync(kFull, incl, 31);
          }
        }
        __syncthreads();
        const Candidate* cands = sc.cands + r * kMaxCandidates;
        for (int64_t c = threadIdx.x >> 5; c < n_chunks; c += blockDim.x >> 5) {
          const ChunkStats s = st[c];
          for (uint32_t k = threadIdx.x & 31; k < s.cnt; k += 32) {
            const Candidate cand = cands[s.off + k];
            s_x[s_dest[c] + k] = cand.x;
            s_j[s_dest[c] + k] = cand.j;
          }
        }
        __syncthreads();
        token = select_and_draw(sh, SharedSource{s_x, s_j, 0, int64_t(n)}, row, p, best.i);
      } else {
        token = select_and_draw(sh, RowSource<T>{xr, vocab}, row, p, best.i);
      }
    }
    if (threadIdx.x == 0) {
      tokens[r] = static_cast<int32_t>(token);
      logprobs[r] = (to_f32(xr[token]) - ms.m) - logf(ms.s);
    }
    __syncthreads();  // shared state is rewritten for the next row
  }
}

template <class T>
void launch(const T* logits, int64_t ld, int64_t rows, int64_t vocab, const RowSampling* params,
            int32_t* tokens, float* logprobs, void* scratch, cudaStream_t stream,
            bool prefilter) {
  constexpr const char* kKernel = "cuda::sample_tokens";
  SPINDLE_KERNEL_REQUIRE(rows >= 0 && vocab > 0, kKernel, "rows >= 0 and vocab > 0");
  SPINDLE_KERNEL_REQUIRE(vocab <= INT32_MAX, kKernel, "vocab must fit int32");
  SPINDLE_KERNEL_REQUIRE(ld >= vocab, kKernel, "ld >= vocab");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(logits != nullptr && params != nullptr && tokens != nullptr &&
                             logprobs != nullptr && scratch != nullptr,
                         kKernel, "logits, params, tokens, logprobs and scratch must be non-null");
  const int64_t n_chunks = chunks_of(vocab);
  prefilter = prefilter && n_chunks <= kMaxChunks;
  const Scratch sc = carve(scratch, rows, vocab);
  check(cudaMemsetAsync(sc.counters, 0, size_t(rows) * sizeof(uint32_t), stream),
        "cudaMemsetAsync (sample_tokens counters)");
  const unsigned row_blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  prefilter_kernel<T><<<dim3(static_cast<unsigned>(n_chunks), row_blocks), kChunkThreads, 0,
                        stream>>>(logits, ld, rows, vocab, params, sc, prefilter);
  check_launch(kKernel);
  sample_kernel<T><<<row_blocks, kThreads, 0, stream>>>(logits, ld, rows, vocab, n_chunks, params,
                                                        sc, prefilter, tokens, logprobs);
  check_launch(kKernel);
}

}  // namespace

size_t sampling_scratch_bytes(int64_t rows, int64_t vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  return align_up(size_t(rows) * sizeof(uint32_t)) +
         align_up(size_t(rows * chunks_of(vocab)) * sizeof(ChunkStats)) +
         size_t(rows) * kMaxCandidates * sizeof(Candidate);
}

template <class T>
void sample_tokens(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                   const RowSampling* params, int32_t* tokens, float* logprobs, void* scratch,
                   cudaStream_t stream) {
  launch(logits, ld, rows, vocab, params, tokens, logprobs, scratch, stream, /*prefilter=*/true);
}

template <class T>
void sample_tokens_full_row(const T* logits, int64_t ld, int64_t rows, int64_t vocab,
                            const RowSampling* params, int32_t* tokens, float* logprobs,
                            void* scratch, cudaStream_t stream) {
  launch(logits, ld, rows, vocab, params, tokens, logprobs, scratch, stream, /*prefilter=*/false);
}

template void sample_tokens<float>(const float*, int64_t, int64_t, int64_t, const RowSampling*,
                                   int32_t*, float*, void*, cudaStream_t);
template void sample_tokens<bf16>(const bf16*, int64_t, int64_t, int64_t, const RowSampling*,
                                  int32_t*, float*, void*, cudaStream_t);
template void sample_tokens_full_row<float>(const float*, int64_t, int64_t, int64_t,
                                            const RowSampling*, int32_t*, float*, void*,
                                            cudaStream_t);
template void sample_tokens_full_row<bf16>(const bf16*, int64_t, int64_t, int64_t,
                                           const RowSampling*, int32_t*, float*, void*,
                                           cudaStream_t);

}  // namespace spindle::kernels::cuda
