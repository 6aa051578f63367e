// Split-KV decode attention (flash-decoding): one query row per sequence over its paged context.
//
// Pass 1 (decode_partial_kernel), grid (sequence, query-head group, split): a block takes up to
// kMaxHeadsPerBlock query heads that share one KV head and one chunk of kChunk keys, and writes
// per (sequence, head, split) the chunk's max score m, Σ exp(s − m) and the unnormalised
// Σ exp(s − m)·v. The heads of a block read each K/V row once per block (L1/L2 serve the rest).
// Pass 2 (decode_combine_kernel), grid (sequence, head): rescales the splits to the global max
// and divides by the global sum. Both passes skip sequences whose n_new is not 1.
//
// The partials live in a stream-ordered scratch allocation (cudaMallocAsync/cudaFreeAsync) of
// n_seqs·n_heads·ceil(max_ctx / kChunk)·(head_dim + 2) floats.

#include <algorithm>

#include "attention_common.cuh"

namespace spindle::kernels::cuda {
namespace detail {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 256;  // keys per split
constexpr int kMaxHeadsPerBlock = 8;

struct DecodeShape {
  int64_t n_heads;
  int64_t group;  // query heads per KV head
  int heads_per_block;
  int max_ctx;
  int max_splits;
  float scale;
};

template <class T>
__global__ void decode_partial_kernel(const T* __restrict__ q, int64_t ld_q, DevicePagedKv<T> cache,
                                      const DeviceAttnSeq* __restrict__ seqs,
                                      const int32_t* __restrict__ block_tables, DecodeShape sh,
                                      float* __restrict__ part_acc, float* __restrict__ part_ml) {
  extern __shared__ __align__(16) float smem[];
  const int s = blockIdx.x;
  const DeviceAttnSeq seq = seqs[s];
  if (seq.n_new != 1) return;
  const int64_t ctx = std::min<int64_t>(int64_t{seq.n_past} + 1, sh.max_ctx);
  const int64_t j0 = int64_t{blockIdx.z} * kChunk;
  if (j0 >= ctx) return;
  const int n_keys = static_cast<int>(std::min<int64_t>(kChunk, ctx - j0));
  const int hd = static_cast<int>(cache.head_dim);
  const int hpb = sh.heads_per_block;
  const int64_t h0 = int64_t{blockIdx.y} * hpb;
  const int64_t width = cache.n_kv_heads * hd;
  const int64_t kv_col = (h0 / sh.group) * hd;
  const int32_t* table = block_tables + seq.table_offset;

  // Layout: row offsets [kChunk] int64, then queries [hpb, hd], then probabilities [hpb, kChunk].
  auto* offs = reinterpret_cast<int64_t*>(smem);
  float* qs = smem + 2 * kChunk;
  float* sc = qs + hpb * hd;
  const T* q_row = q + seq.row_begin * ld_q + h0 * hd;  // heads h0.. are contiguous
  for (int e = threadIdx.x; e < hpb * hd; e += blockDim.x) qs[e] = sh.scale * to_f(q_row[e]);
  for (int j = threadIdx.x; j < n_keys; j += blockDim.x)
    offs[j] = paged_offset(table, j0 + j, cache.block_size, cache.n_blocks, width, kv_col);
  __syncthreads();

  // Scores: neighbouring threads take the heads of one key, so they read the same K row.
  for (int e = threadIdx.x; e < n_keys * hpb; e += blockDim.x) {
    const int j = e / hpb;
    const int hh = e % hpb;
    sc[hh * kChunk + j] = offs[j] < 0 ? 0.0f : dot_row(qs + hh * hd, cache.k + offs[j], hd);
  }
  __syncthreads();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  for (int hh = warp; hh < hpb; hh += blockDim.x / 32) {
    float* row = sc + hh * kChunk;
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
      const int64_t idx = (int64_t{s} * sh.n_heads + h0 + hh) * sh.max_splits + blockIdx.z;
      part_ml[2 * idx] = m;
      part_ml[2 * idx + 1] = sum;
    }
  }
  __syncthreads();

  // Σ_j p_j·v_j: neighbouring threads take neighbouring columns of one V row.
  for (int e = threadIdx.x; e < hpb * hd; e += blockDim.x) {
    const int hh = e / hd;
    const int d = e % hd;
    const float* p = sc + hh * kChunk;
    float acc = 0.0f;
    for (int j = 0; j < n_keys; ++j)
      if (offs[j] >= 0) acc = fmaf(p[j], to_f(cache.v[offs[j] + d]), acc);
    const int64_t idx = (int64_t{s} * sh.n_heads + h0 + hh) * sh.max_splits + blockIdx.z;
    part_acc[idx * hd + d] = acc;
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
  const int n_splits = static_cast<int>((ctx + kChunk - 1) / kChunk);
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
    o[d] = from_f<T>(acc * inv);
  }
}

}  // namespace

template <class T>
void launch_decode(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                   const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                   const int32_t* block_tables, int32_t max_ctx, float scale, cudaStream_t stream) {
  const int64_t group = n_heads / cache.n_kv_heads;
  int hpb = static_cast<int>(std::min<int64_t>(group, kMaxHeadsPerBlock));
  while (group % hpb != 0) --hpb;  // blocks never straddle two KV heads
  const int max_splits = (max_ctx + kChunk - 1) / kChunk;
  SPINDLE_KERNEL_REQUIRE(max_splits <= 65535, "attention_decode", "max_ctx too large (grid)");
  const DecodeShape sh{n_heads, group, hpb, max_ctx, max_splits, scale};
  const int hd = static_cast<int>(cache.head_dim);
  const size_t n_parts = static_cast<size_t>(n_seqs) * n_heads * max_splits;

  float* scratch = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&scratch), n_parts * (hd + 2) * sizeof(float),
                        stream),
        "cudaMallocAsync (attention_decode scratch)");
  float* part_acc = scratch;
  float* part_ml = scratch + n_parts * hd;
  const size_t smem = sizeof(float) * (2 * kChunk + hpb * (hd + kChunk));
  decode_partial_kernel<T>
      <<<dim3(n_seqs, static_cast<unsigned>(n_heads / hpb), max_splits), kThreads, smem, stream>>>(
          q, ld_q, cache, seqs, block_tables, sh, part_acc, part_ml);
  const cudaError_t launch1 = cudaGetLastError();
  if (launch1 == cudaSuccess) {
    decode_combine_kernel<T><<<dim3(n_seqs, static_cast<unsigned>(n_heads)), 64, 0, stream>>>(
        out, ld_out, seqs, hd, sh, part_acc, part_ml);
  }
  const cudaError_t launch2 = cudaGetLastError();
  // Free in stream order whatever happened, then report the first launch error.
  cudaFreeAsync(scratch, stream);
  check(launch1, "attention_decode (partial kernel)");
  check(launch2, "attention_decode (combine kernel)");
}

template void launch_decode<float>(const float*, int64_t, float*, int64_t, int64_t,
                                   const DevicePagedKv<float>&, const DeviceAttnSeq*, int32_t,
                                   const int32_t*, int32_t, float, cudaStream_t);
template void launch_decode<bf16>(const bf16*, int64_t, bf16*, int64_t, int64_t,
                                  const DevicePagedKv<bf16>&, const DeviceAttnSeq*, int32_t,
                                  const int32_t*, int32_t, float, cudaStream_t);

}  // namespace detail

template <class T>
void attention_decode(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                      const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                      const int32_t* block_tables, int32_t max_ctx, float scale,
                      cudaStream_t stream) {
  if (!detail::check_paged_args("attention_decode", q, ld_q, out, ld_out, n_heads, cache, seqs,
                                n_seqs, block_tables, /*max_new=*/1, max_ctx))
    return;
  detail::launch_decode(q, ld_q, out, ld_out, n_heads, cache, seqs, n_seqs, block_tables, max_ctx,
                        scale, stream);
}

template void attention_decode<float>(const float*, int64_t, float*, int64_t, int64_t,
                                      const DevicePagedKv<float>&, const DeviceAttnSeq*, int32_t,
                                      const int32_t*, int32_t, float, cudaStream_t);
template void attention_decode<bf16>(const bf16*, int64_t, bf16*, int64_t, int64_t,
                                     const DevicePagedKv<bf16>&, const DeviceAttnSeq*, int32_t,
                                     const int32_t*, int32_t, float, cudaStream_t);

}  // namespace spindle::kernels::cuda
