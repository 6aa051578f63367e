// Split-KV decode attention (flash-decoding): one query row per sequence over its paged context.
//
// Pass 1 (decode_partial_kernel), grid (sequence, query-head group, split): a block takes up to
// kMaxHeadsPerBlock query heads that share one KV head and one split of `chunk` keys (32..256,
// chosen on the host so that even one short sequence fills the GPU with blocks).
//  - Scores: a key is handled by L = next_pow2(head_dim / 8) lanes, each holding 8 columns of the
//    K row (one 16-byte load for bf16) and the same columns of every head's query in registers,
//    so the heads of one GQA group reuse each K load; the dot products finish with L-lane
//    shuffles. A warp scores 32 / L keys at a time.
//  - Softmax over the split: a warp per head, probabilities kept in shared memory.
//  - Σ p·v: a thread owns 8 columns of V and a slice of the split's keys (neighbouring threads
//    read neighbouring columns of one V row); the slices are summed in shared memory.
// The block writes per (sequence, head, split) the split's max score m, Σ exp(s − m) and the
// unnormalised Σ exp(s − m)·v — or, when one split covers every sequence (max_ctx <= chunk), the
// normalised output row directly and pass 2 is skipped.
// Pass 2 (decode_combine_kernel), grid (sequence, head): rescales the splits to the global max
// and divides by the global sum. Both passes skip sequences whose n_new is not 1.
//
// The partials (n_seqs·n_heads·splits·(head_dim + 2) floats) live in scratch the caller passes
// (attention_scratch_bytes sizes it), so a call allocates nothing and a captured CUDA graph
// holds no allocation of its own.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attention_common.cuh"

namespace spindle::kernels::cuda {
namespace detail {
namespace {

constexpr int kThreads = 128;
constexpr int kMinChunk = 32;   // keys per split, a power of two in [kMinChunk, kMaxChunk]
constexpr int kMaxChunk = 256;
constexpr int64_t kTargetBlocks = 256;  // ~2 blocks per SM on an H100/H200
constexpr int kMaxHeadsPerBlock = 8;

struct DecodeShape {
  int64_t n_heads;
  int64_t group;  // query heads per KV head
  int heads_per_block;
  int max_ctx;
  int max_splits;
  int chunk;
  int lanes_per_key;  // next power of two >= head_dim / 8
  bool vec_loads;     // cache.k and cache.v 16-byte aligned: K/V rows read as 8-element vectors
  float scale;
};

// x[0..8) = p[0..8) as fp32; p is 8-element aligned within an aligned base when vec.
__device__ __forceinline__ void load8(const float* p, bool vec, float (&x)[8]) {
  if (vec) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    const float4 b = *reinterpret_cast<const float4*>(p + 4);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
    x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = p[i];
  }
}
__device__ __forceinline__ void load8(const bf16* p, bool vec, float (&x)[8]) {
  if (vec) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = __bfloat162float(p[i]);
  }
}

// Shared memory of one block, in floats: the V-slice partial sums (the query rows alias their
// start before the PV pass), row offsets [chunk] int64, probabilities [hpb, chunk], (m, Σ) [hpb].
__host__ __device__ inline int decode_red_floats(int hd, int hpb) {
  return (kThreads / (hd / 8)) * hpb * hd;
}
__host__ __device__ inline int decode_smem_floats(int hd, int hpb, int chunk) {
  return decode_red_floats(hd, hpb) + 2 * chunk + hpb * chunk + 2 * hpb;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    decode_partial_kernel(const T* __restrict__ q, int64_t ld_q, DevicePagedKv<T> cache,
                          const DeviceAttnSeq* __restrict__ seqs,
                          const int32_t* __restrict__ block_tables, DecodeShape sh,
                          float* __restrict__ part_acc, float* __restrict__ part_ml,
                          T* __restrict__ out, int64_t ld_out) {
  extern __shared__ __align__(16) float smem[];
  const int s = blockIdx.x;
  const DeviceAttnSeq seq = seqs[s];
  if (seq.n_new != 1) return;
  const int chunk = sh.chunk;
  const int64_t ctx = std::min<int64_t>(int64_t{seq.n_past} + 1, sh.max_ctx);
  const int64_t j0 = int64_t{blockIdx.z} * chunk;
  if (j0 >= ctx) return;
  const int n_keys = static_cast<int>(std::min<int64_t>(chunk, ctx - j0));
  const int hd = static_cast<int>(cache.head_dim);
  const int nvec = hd / 8;
  const int hpb = sh.heads_per_block;
  const int64_t h0 = int64_t{blockIdx.y} * hpb;
  const int64_t width = cache.n_kv_heads * hd;
  const int64_t kv_col = (h0 / sh.group) * hd;
  const int32_t* table = block_tables + seq.table_offset;

  float* red = smem;  // [n_slices, hpb, hd]; the queries [hpb, hd] alias it until the PV pass
  float* qs = smem;
  auto* offs = reinterpret_cast<int64_t*>(smem + decode_red_floats(hd, hpb));
  float* sc = smem + decode_red_floats(hd, hpb) + 2 * chunk;
  float* ml = sc + hpb * chunk;

  const T* q_row = q + seq.row_begin * ld_q + h0 * hd;  // heads h0.. are contiguous
  for (int e = threadIdx.x; e < hpb * hd; e += kThreads) qs[e] = sh.scale * to_f32(q_row[e]);
  for (int j = threadIdx.x; j < n_keys; j += kThreads)
    offs[j] = paged_offset(table, j0 + j, cache.block_size, cache.n_blocks, width, kv_col);
  __syncthreads();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  constexpr int kWarps = kThreads / 32;

  // Scores. Lanes [k·L, (k+1)·L) of a warp take one key; lane sub holds columns [8·sub, 8·sub+8).
  {
    const int L = sh.lanes_per_key;
    const int sub = lane % L;
    const int kslot = lane / L;
    const int keys_per_warp = 32 / L;
    const bool active = sub < nvec;
    float qr[kMaxHeadsPerBlock][8];
#pragma unroll
    for (int hh = 0; hh < kMaxHeadsPerBlock; ++hh)
#pragma unroll
      for (int i = 0; i < 8; ++i)
        qr[hh][i] = (hh < hpb && active) ? qs[hh * hd + sub * 8 + i] : 0.0f;
    // Warp-uniform trip count: every lane reaches the shuffles. Unrolled so that several K
    // loads are in flight at once.
#pragma unroll 4
    for (int jb = warp * keys_per_warp; jb < n_keys; jb += kWarps * keys_per_warp) {
      const int j = jb + kslot;
      const int64_t off = j < n_keys ? offs[j] : -1;
      float kr[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (active && off >= 0) load8(cache.k + off + sub * 8, sh.vec_loads, kr);
#pragma unroll
      for (int hh = 0; hh < kMaxHeadsPerBlock; ++hh) {
        if (hh >= hpb) break;
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(qr[hh][i], kr[i], d);
        for (int o = L / 2; o > 0; o >>= 1) d += __shfl_xor_sync(kFullMask, d, o);
        // A key outside the cache scores 0 (and its value reads as zeros below).
        if (sub == 0 && j < n_keys) sc[hh * chunk + j] = d;
      }
    }
  }
  __syncthreads();

  for (int hh = warp; hh < hpb; hh += kWarps) {
    float* row = sc + hh * chunk;
    float m = -INFINITY;
    for (int j = lane; j < n_keys; j += 32) m = fmaxf(m, row[j]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j < n_keys; j += 32) {
      const float p = expf(row[j] - m);
      row[j] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      ml[2 * hh] = m;
      ml[2 * hh + 1] = sum;
      if (part_ml != nullptr) {
        const int64_t idx = (int64_t{s} * sh.n_heads + h0 + hh) * sh.max_splits + blockIdx.z;
        part_ml[2 * idx] = m;
        part_ml[2 * idx + 1] = sum;
      }
    }
  }
  __syncthreads();

  // Σ_j p_j·v_j. Thread (slice, c) owns columns [8c, 8c+8) over keys slice, slice + n_slices, ...
  {
    const int c = threadIdx.x % nvec;
    const int slice = threadIdx.x / nvec;
    const int n_slices = kThreads / nvec;
    if (slice < n_slices) {
      float acc[kMaxHeadsPerBlock][8];
#pragma unroll
      for (int hh = 0; hh < kMaxHeadsPerBlock; ++hh)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[hh][i] = 0.0f;
#pragma unroll 2
      for (int j = slice; j < n_keys; j += n_slices) {
        const int64_t off = offs[j];
        if (off < 0) continue;
        float vr[8];
        load8(cache.v + off + c * 8, sh.vec_loads, vr);
#pragma unroll
        for (int hh = 0; hh < kMaxHeadsPerBlock; ++hh) {
          if (hh >= hpb) break;
          const float p = sc[hh * chunk + j];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[hh][i] = fmaf(p, vr[i], acc[hh][i]);
        }
      }
#pragma unroll
      for (int hh = 0; hh < kMaxHeadsPerBlock; ++hh) {
        if (hh >= hpb) break;
        auto* dst = reinterpret_cast<float4*>(red + (slice * hpb + hh) * hd + c * 8);
        dst[0] = make_float4(acc[hh][0], acc[hh][1], acc[hh][2], acc[hh][3]);
        dst[1] = make_float4(acc[hh][4], acc[hh][5], acc[hh][6], acc[hh][7]);
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < hpb * hd; e += kThreads) {
      float total = 0.0f;
      for (int sl = 0; sl < n_slices; ++sl) total += red[sl * hpb * hd + e];
      const int hh = e / hd;
      if (part_acc != nullptr) {
        const int64_t idx = (int64_t{s} * sh.n_heads + h0 + hh) * sh.max_splits + blockIdx.z;
        part_acc[idx * hd + e % hd] = total;
      } else {
        out[seq.row_begin * ld_out + h0 * hd + e] = from_f32<T>(total / ml[2 * hh + 1]);
      }
    }
  }
}

template <class T>
__global__ void decode_combine_kernel(T* __restrict__ out, int64_t ld_out,
                                      const DeviceAttnSeq* __restrict__ seqs, int hd,
                                      DecodeShape sh, const float* __restrict__ part_acc,
                                      const float* __restrict__ part_ml) {
  const int s = blockIdx.x;
  const int64_t h = blockIdx.y;
  const DeviceAttnSeq seq = seqs[s];
  if (seq.n_new != 1) return;
  const int64_t ctx = std::min<int64_t>(int64_t{seq.n_past} + 1, sh.max_ctx);
  const int n_splits = static_cast<int>((ctx + sh.chunk - 1) / sh.chunk);
  const int64_t base = (int64_t{s} * sh.n_heads + h) * sh.max_splits;
  float m = -INFINITY;
  for (int p = 0; p < n_splits; ++p) m = fmaxf(m, part_ml[2 * (base + p)]);
  float sum = 0.0f;
  for (int p = 0; p < n_splits; ++p)
    sum += part_ml[2 * (base + p) + 1] * expf(part_ml[2 * (base + p)] - m);
  const float inv = 1.0f / sum;
  T* o = out + seq.row_begin * ld_out + h * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int p = 0; p < n_splits; ++p)
      acc = fmaf(part_acc[(base + p) * hd + d], expf(part_ml[2 * (base + p)] - m), acc);
    o[d] = from_f32<T>(acc * inv);
  }
}

// The split plan of a call: the largest split (keys) that still gives about kTargetBlocks blocks.
struct DecodePlan {
  int hpb = 1;              // query heads per block
  int64_t head_blocks = 1;  // blocks per sequence and split
  int chunk = kMaxChunk;    // keys per split
  int64_t max_splits = 1;
};

DecodePlan decode_plan(int32_t n_seqs, int64_t n_heads, int64_t n_kv_heads, int32_t max_ctx) {
  DecodePlan p;
  const int64_t group = n_heads / n_kv_heads;
  p.hpb = static_cast<int>(std::min<int64_t>(group, kMaxHeadsPerBlock));
  while (group % p.hpb != 0) --p.hpb;  // blocks never straddle two KV heads
  p.head_blocks = n_heads / p.hpb;
  while (p.chunk > kMinChunk &&
         int64_t{n_seqs} * p.head_blocks * ((int64_t{max_ctx} + p.chunk - 1) / p.chunk) <
             kTargetBlocks)
    p.chunk /= 2;
  p.max_splits = (int64_t{max_ctx} + p.chunk - 1) / p.chunk;
  return p;
}

}  // namespace

template <class T>
void launch_decode(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                   const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                   const int32_t* block_tables, int32_t max_ctx, float scale, void* scratch,
                   size_t scratch_size, cudaStream_t stream) {
  const DecodePlan plan = decode_plan(n_seqs, n_heads, cache.n_kv_heads, max_ctx);
  const int64_t group = n_heads / cache.n_kv_heads;
  const int hpb = plan.hpb;
  const int64_t head_blocks = plan.head_blocks;
  const int chunk = plan.chunk;
  const int64_t max_splits = plan.max_splits;
  SPINDLE_KERNEL_REQUIRE(max_splits <= 65535, "attention_decode", "max_ctx too large (grid)");
  const int hd = static_cast<int>(cache.head_dim);
  int lanes = 1;
  while (lanes < hd / 8) lanes *= 2;
  const bool vec = (reinterpret_cast<uintptr_t>(cache.k) | reinterpret_cast<uintptr_t>(cache.v)) %
                       16 ==
                   0;
  const DecodeShape sh{n_heads, group, hpb, max_ctx, static_cast<int>(max_splits), chunk, lanes,
                       vec, scale};
  const bool direct = max_splits == 1;
  const size_t n_parts = static_cast<size_t>(n_seqs) * n_heads * max_splits;
  const size_t scratch_bytes = direct ? 0 : n_parts * (hd + 2) * sizeof(float);

  SPINDLE_KERNEL_REQUIRE(scratch_bytes <= scratch_size && (scratch_bytes == 0 || scratch != nullptr),
                         "attention_decode",
                         "scratch holds " + std::to_string(scratch_size) + " bytes, the call needs " +
                             std::to_string(scratch_bytes) + " (attention_scratch_bytes)");
  float* part_scratch = static_cast<float*>(scratch);
  float* part_acc = direct ? nullptr : part_scratch;
  float* part_ml = direct ? nullptr : part_scratch + n_parts * hd;
  const size_t smem = sizeof(float) * decode_smem_floats(hd, hpb, chunk);
  decode_partial_kernel<T><<<dim3(n_seqs, static_cast<unsigned>(head_blocks),
                                  static_cast<unsigned>(max_splits)),
                             kThreads, smem, stream>>>(q, ld_q, cache, seqs, block_tables, sh,
                                                       part_acc, part_ml, out, ld_out);
  const cudaError_t launch1 = cudaGetLastError();
  cudaError_t launch2 = cudaSuccess;
  if (launch1 == cudaSuccess && !direct) {
    decode_combine_kernel<T><<<dim3(n_seqs, static_cast<unsigned>(n_heads)), 64, 0, stream>>>(
        out, ld_out, seqs, hd, sh, part_acc, part_ml);
    launch2 = cudaGetLastError();
  }
  check(launch1, "attention_decode (partial kernel)");
  check(launch2, "attention_decode (combine kernel)");
}

template void launch_decode<float>(const float*, int64_t, float*, int64_t, int64_t,
                                   const DevicePagedKv<float>&, const DeviceAttnSeq*, int32_t,
                                   const int32_t*, int32_t, float, void*, size_t, cudaStream_t);
template void launch_decode<bf16>(const bf16*, int64_t, bf16*, int64_t, int64_t,
                                  const DevicePagedKv<bf16>&, const DeviceAttnSeq*, int32_t,
                                  const int32_t*, int32_t, float, void*, size_t, cudaStream_t);

size_t decode_scratch_bytes(int32_t n_seqs, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                            int32_t max_ctx) {
  if (n_seqs <= 0 || n_heads <= 0 || n_kv_heads <= 0 || max_ctx <= 0) return 0;
  const DecodePlan plan = decode_plan(n_seqs, n_heads, n_kv_heads, max_ctx);
  if (plan.max_splits == 1) return 0;
  return static_cast<size_t>(n_seqs) * n_heads * plan.max_splits * (head_dim + 2) * sizeof(float);
}

}  // namespace detail

size_t attention_scratch_bytes(int32_t n_seqs, int64_t n_heads, int64_t n_kv_heads,
                               int64_t head_dim, int32_t max_ctx) {
  return detail::decode_scratch_bytes(n_seqs, n_heads, n_kv_heads, head_dim, max_ctx);
}

template <class T>
void attention_decode(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                      const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                      const int32_t* block_tables, int32_t max_ctx, float scale, void* scratch,
                      size_t scratch_bytes, cudaStream_t stream) {
  if (!detail::check_paged_args("attention_decode", q, ld_q, out, ld_out, n_heads, cache, seqs,
                                n_seqs, block_tables, /*max_new=*/1, max_ctx))
    return;
  detail::launch_decode(q, ld_q, out, ld_out, n_heads, cache, seqs, n_seqs, block_tables, max_ctx,
                        scale, scratch, scratch_bytes, stream);
}

template void attention_decode<float>(const float*, int64_t, float*, int64_t, int64_t,
                                      const DevicePagedKv<float>&, const DeviceAttnSeq*, int32_t,
                                      const int32_t*, int32_t, float, void*, size_t,
                                      cudaStream_t);
template void attention_decode<bf16>(const bf16*, int64_t, bf16*, int64_t, int64_t,
                                     const DevicePagedKv<bf16>&, const DeviceAttnSeq*, int32_t,
                                     const int32_t*, int32_t, float, void*, size_t, cudaStream_t);

}  // namespace spindle::kernels::cuda
