// kv_cache_write and attention_paged's dispatch on the GPU (kernels in attention_decode.cu and
// attention_prefill.cu).
//
// Dispatch: sequences with n_new == 1 go to the split-KV decode kernel, all others to the
// prefill kernel, which skips the one-token sequences; both launch on the same stream and write
// disjoint rows. A batch of only one-token sequences (max_new == 1) launches decode alone.
//
// Device-resident tables cannot be checked on the host. A slot outside the cache is skipped by
// kv_cache_write and a block-table entry outside [0, n_blocks) reads as a zero key and value,
// so a caller bug gives wrong numbers but never a fault.

#include <algorithm>

#include "attention_common.cuh"

namespace spindle::kernels::cuda {
namespace {

template <class T>
__global__ void kv_cache_write_kernel(DevicePagedKv<T> cache, const T* __restrict__ k_new,
                                      const T* __restrict__ v_new, int64_t ld, int64_t rows,
                                      const int64_t* __restrict__ slot) {
  const int64_t width = cache.n_kv_heads * cache.head_dim;
  const int64_t n_slots = cache.n_blocks * cache.block_size;
  const int64_t total = rows * width;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / width;
    const int64_t c = e % width;
    const int64_t sl = slot[t];
    if (sl < 0 || sl >= n_slots) continue;
    cache.k[sl * width + c] = k_new[t * ld + c];
    if (cache.v != cache.k) cache.v[sl * width + c] = v_new[t * ld + c];  // MLA: one latent row
  }
}

}  // namespace

template <class T>
void kv_cache_write(const DevicePagedKv<T>& cache, const T* k_new, const T* v_new, int64_t ld,
                    int64_t rows, const int64_t* slot, cudaStream_t stream) {
  constexpr const char* kKernel = "kv_cache_write";
  SPINDLE_KERNEL_REQUIRE(cache.k != nullptr && cache.v != nullptr, kKernel,
                         "cache.k and cache.v must be non-null");
  SPINDLE_KERNEL_REQUIRE(cache.n_blocks > 0 && cache.block_size > 0, kKernel,
                         "cache.n_blocks > 0 and cache.block_size > 0");
  SPINDLE_KERNEL_REQUIRE(cache.n_kv_heads > 0 && cache.head_dim > 0, kKernel,
                         "cache.n_kv_heads > 0 and cache.head_dim > 0");
  SPINDLE_KERNEL_REQUIRE(rows >= 0, kKernel, "rows >= 0");
  SPINDLE_KERNEL_REQUIRE(ld >= cache.n_kv_heads * cache.head_dim, kKernel,
                         "ld >= n_kv_heads * head_dim");
  if (rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(k_new != nullptr && v_new != nullptr && slot != nullptr, kKernel,
                         "k_new, v_new and slot must be non-null");
  constexpr int kThreads = 256;
  const int64_t total = rows * cache.n_kv_heads * cache.head_dim;
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{1} << 16));
  kv_cache_write_kernel<T><<<blocks, kThreads, 0, stream>>>(cache, k_new, v_new, ld, rows, slot);
  check_launch(kKernel);
}

template <class T>
void attention_paged(const T* q, int64_t ld_q, T* out, int64_t ld_out, int64_t n_heads,
                     const DevicePagedKv<T>& cache, const DeviceAttnSeq* seqs, int32_t n_seqs,
                     const int32_t* block_tables, int32_t max_new, int32_t max_ctx, float scale,
                     void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (!detail::check_paged_args("attention_paged", q, ld_q, out, ld_out, n_heads, cache, seqs,
                                n_seqs, block_tables, max_new, max_ctx))
    return;
  detail::launch_decode(q, ld_q, out, ld_out, n_heads, cache, seqs, n_seqs, block_tables, max_ctx,
                        scale, scratch, scratch_bytes, stream);
  if (max_new > 1) {
    detail::launch_prefill(q, ld_q, out, ld_out, n_heads, cache, seqs, n_seqs, block_tables,
                           max_new, scale, /*skip_single=*/true, stream);
  }
}

#define SPINDLE_INSTANTIATE_ATTENTION(T)                                                         \
  template void kv_cache_write<T>(const DevicePagedKv<T>&, const T*, const T*, int64_t, int64_t, \
                                  const int64_t*, cudaStream_t);                                 \
  template void attention_paged<T>(const T*, int64_t, T*, int64_t, int64_t,                      \
                                   const DevicePagedKv<T>&, const DeviceAttnSeq*, int32_t,       \
                                   const int32_t*, int32_t, int32_t, float, void*, size_t,    \
                                   cudaStream_t);
SPINDLE_INSTANTIATE_ATTENTION(float)
SPINDLE_INSTANTIATE_ATTENTION(bf16)
#undef SPINDLE_INSTANTIATE_ATTENTION

}  // namespace spindle::kernels::cuda
