// Where a LoRA training step's time goes: every op of the training path timed alone at the
// training bench's shape (8 sequences x 256 tokens = 2048 rows, rank 16 on every linear of one
// layer, layer 0's real weights), eagerly, `reps` launches between two cudaEvents after a
// warm-up launch. Printed as "op  us  x(count per step)  us per step", then the sum: the
// dominant op is the largest "per step" figure.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_gpu.h"
#include "spindle/engine/trainer.h"
#include "spindle/engine_cuda/device_kv_cache.h"
#include "spindle/engine_cuda/device_lora_pool.h"
#include "spindle/engine_cuda/trainer.h"
#include "spindle/kernels/cuda/activation.h"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/loss.h"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/cuda/rope.h"

namespace spindle::bench {
namespace {

namespace cuda = kernels::cuda;
using cuda::bf16;
using engine::LoraTarget;

// Microseconds per launch of `op`: one warm-up launch, then `reps` launches timed together.
double eager_us(cudaStream_t s, const std::function<void()>& op, int reps) {
  op();
  cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  GpuTimer timer;
  timer.start(s);
  for (int i = 0; i < reps; ++i) op();
  return timer.stop_ms(s) * 1e3 / reps;
}

}  // namespace

void run_gpu_train_breakdown(engine_cuda::DeviceModel& model) {
  const engine::ModelConfig& c = model.config();
  if (model.precision() != engine_cuda::Precision::bf16) return;
  const cudaStream_t s = model.stream();
  const engine_cuda::DeviceWeights& w = model.weights();
  const auto& L = w.layer(0);
  const int64_t n_seqs = 8, seq_len = 256, rows = n_seqs * seq_len, rank = 16;
  const int64_t nl = c.n_layers, V = c.vocab_size;
  const engine_cuda::DeviceTrainerOptions topt;
  const int64_t chunk =
      std::max<int64_t>(1, int64_t(topt.unembed_chunk_bytes / (size_t(V) * sizeof(bf16))));
  const int64_t n_chunks = (rows + chunk - 1) / chunk;
  const int reps = 10;

  const int64_t wide = std::max({c.dim, c.q_dim(), c.hidden_dim});
  engine_cuda::DeviceTensor x(rows, wide, engine_cuda::Precision::bf16),
      y(rows, wide, engine_cuda::Precision::bf16), z(rows, wide, engine_cuda::Precision::bf16),
      dz(rows, wide, engine_cuda::Precision::bf16), dw(rows, wide, engine_cuda::Precision::bf16);
  engine_cuda::DeviceTensor logits(chunk, V, engine_cuda::Precision::bf16);
  for (auto* t : {&x, &y, &z, &dz, &dw, &logits}) t->zero(s);
  cuda::DeviceBuffer<float> inv_rms(static_cast<size_t>(rows * c.n_heads));
  {
    std::vector<float> ones(size_t(rows * c.n_heads), 1.0f);
    inv_rms.upload(ones);
  }

  std::printf(
      "training op breakdown (%lld rows = %lld x %lld tokens, rank %lld, unembed chunk "
      "%lld rows x %lld chunks; eager, mean of %d launches):\n",
      (long long)rows, (long long)n_seqs, (long long)seq_len, (long long)rank, (long long)chunk,
      (long long)n_chunks, reps);
  double total = 0;
  auto report = [&](const std::string& name, double us, int64_t count) {
    std::printf("  %-34s %9.1f us  x%-4lld %10.1f us per step\n", name.c_str(), us,
                (long long)count, us * double(count));
    total += us * double(count);
  };

  // Base linears: forward y = x·Wᵀ and backward dx = dy·W, at 2048 rows.
  struct Proj {
    const char* name;
    const engine_cuda::DeviceTensor& W;
    LoraTarget target;
  };
  const Proj projs[] = {
      {"q_proj", L.wq, LoraTarget::q},           {"k_proj", L.wk, LoraTarget::k},
      {"v_proj", L.wv, LoraTarget::v},           {"o_proj", L.wo, LoraTarget::o},
      {"gate_proj", L.w_gate, LoraTarget::gate}, {"up_proj", L.w_up, LoraTarget::up},
      {"down_proj", L.w_down, LoraTarget::down}};
  for (const Proj& p : projs) {
    const int64_t k = p.W.cols(), n = p.W.rows();
    report(std::string("linear ") + p.name,
           eager_us(
               s,
               [&] {
                 cuda::linear<bf16>(model.blas(), x.data<bf16>(), k, rows, k, p.W.data<bf16>(), n,
                                    y.data<bf16>(), n, 0.0f, s);
               },
               reps),
           nl);
    report(std::string("gemm dx=dy*W ") + p.name,
           eager_us(
               s,
               [&] {
                 cuda::gemm<bf16>(model.blas(), kernels::Trans::no, kernels::Trans::no, rows, k, n,
                                  1.0f, y.data<bf16>(), n, p.W.data<bf16>(), k, 0.0f,
                                  dz.data<bf16>(), k, s);
               },
               reps),
           nl);
  }

  // LoRA (one segment of 2048 rows in slot 0, rank 16) on every projection of layer 0.
  {
    engine_cuda::DeviceLoraPool pool(
        c, {.max_slots = 1, .max_rank = rank, .targets = gpu_bench_targets()});
    pool.load(0, engine::init_lora(c, rank, 32.0f, gpu_bench_targets(), 7));
    pool.synchronize();
    cuda::DeviceBuffer<kernels::LoraSegment> seg(1);
    const std::vector<kernels::LoraSegment> host_seg{{0, rows, 0}};
    seg.upload(host_seg);
    // Without the host mirror the backward runs the hand-written kernels; with it (and the
    // pool's host rank table), cuBLAS GEMMs: both timed side by side.
    const cuda::DeviceSegments segs{seg.data(), 1, rows};
    const cuda::DeviceSegments segs_gemm{seg.data(), 1, rows, host_seg.data()};
    cuda::DeviceBuffer<float> h(static_cast<size_t>(rows * rank)),
        dh(static_cast<size_t>(rows * rank));
    h.zero(s);
    dh.zero(s);
    const int64_t max_out = std::max({c.dim, c.q_dim(), c.hidden_dim});
    cuda::DeviceBuffer<float> dA(static_cast<size_t>(rank * wide)),
        dB(static_cast<size_t>(max_out * rank));
    dA.zero(s);
    dB.zero(s);
    double kernels_us = 0, gemm_us = 0;
    for (const Proj& p : projs) {
      const auto view = pool.view(0, p.target);
      if (!view) continue;
      const int64_t k = view->d_in, n = view->d_out;
      kernels::cuda::DeviceBuffer<unsigned char> lora_scratch(
          std::max({size_t{1}, cuda::lora_backward_scratch_bytes<bf16>(*view, segs),
                    cuda::lora_backward_scratch_bytes<bf16>(*view, segs_gemm, true)}));
      report(std::string("lora_shrink ") + p.name,
             eager_us(
                 s, [&] { cuda::lora_shrink<bf16>(x.data<bf16>(), k, *view, segs, h.data(), s); },
                 reps),
             nl);
      report(
          std::string("lora_expand ") + p.name,
          eager_us(
              s, [&] { cuda::lora_expand<bf16>(h.data(), *view, segs, y.data<bf16>(), n, 0, s); },
              reps),
          nl);
      for (const bool gemm : {false, true}) {
        const cuda::DeviceSegments& sg = gemm ? segs_gemm : segs;
        cuda::Blas* blas = gemm ? &model.blas() : nullptr;
        const std::string path = gemm ? " (cuBLAS) " : " (kernels) ";
        const double e_us = eager_us(
            s,
            [&] {
              cuda::lora_expand_backward<bf16>(h.data(), y.data<bf16>(), n, 0, *view, sg, dh.data(),
                                               dB.data(), lora_scratch.data(), lora_scratch.size(),
                                               s, blas);
            },
            reps);
        const double s_us = eager_us(
            s,
            [&] {
              cuda::lora_shrink_backward<bf16>(x.data<bf16>(), k, dh.data(), *view, sg, dA.data(),
                                               dz.data<bf16>(), k, lora_scratch.data(),
                                               lora_scratch.size(), s, blas);
            },
            reps);
        report("lora_expand_backward" + path + p.name, e_us, nl);
        report("lora_shrink_backward" + path + p.name, s_us, nl);
        (gemm ? gemm_us : kernels_us) += e_us + s_us;
      }
    }
    std::printf(
        "gpu_train_ops/lora_backward_kernels_over_cublas: %.2f  (one layer's targets, "
        "%lld rows, rank %lld)\n",
        gemm_us > 0 ? kernels_us / gemm_us : 0.0, static_cast<long long>(rows),
        static_cast<long long>(rank));
  }

  // Pointwise ops of the backward.
  report("rmsnorm_backward (dim)",
         eager_us(
             s,
             [&] {
               cuda::rmsnorm_backward<bf16>(x.data<bf16>(), c.dim, L.ffn_norm.data<float>(),
                                            inv_rms.data(), y.data<bf16>(), c.dim, dz.data<bf16>(),
                                            c.dim, rows, c.dim, 1.0f, s);
             },
             reps),
         2 * nl + 1);
  report("rmsnorm_backward (q heads)",
         eager_us(
             s,
             [&] {
               cuda::rmsnorm_backward<bf16>(x.data<bf16>(), c.head_dim, L.q_norm.data<float>(),
                                            inv_rms.data(), y.data<bf16>(), c.head_dim,
                                            dz.data<bf16>(), c.head_dim, rows * c.n_heads,
                                            c.head_dim, 0.0f, s);
             },
             reps),
         nl);
  report("rmsnorm_backward (k heads)",
         eager_us(
             s,
             [&] {
               cuda::rmsnorm_backward<bf16>(x.data<bf16>(), c.head_dim, L.k_norm.data<float>(),
                                            inv_rms.data(), y.data<bf16>(), c.head_dim,
                                            dz.data<bf16>(), c.head_dim, rows * c.n_kv_heads,
                                            c.head_dim, 0.0f, s);
             },
             reps),
         nl);
  report("swiglu_backward",
         eager_us(
             s,
             [&] {
               cuda::swiglu_backward<bf16>(x.data<bf16>(), y.data<bf16>(), z.data<bf16>(),
                                           dz.data<bf16>(), dw.data<bf16>(), rows * c.hidden_dim,
                                           s);
             },
             reps),
         nl);
  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) positions[size_t(r)] = int32_t(r % seq_len);
  cuda::DeviceBuffer<int32_t> pos(static_cast<size_t>(rows));
  pos.upload(positions);
  report("rope inverse (q)",
         eager_us(
             s,
             [&] {
               cuda::rope<bf16>(dz.data<bf16>(), c.q_dim(), rows, c.n_heads, c.head_dim, pos.data(),
                                w.rope_inv_freq().data<float>(), kernels::RopeStyle::half, true, s);
             },
             reps),
         nl);
  report("rope inverse (k)",
         eager_us(
             s,
             [&] {
               cuda::rope<bf16>(dz.data<bf16>(), c.kv_dim(), rows, c.n_kv_heads, c.head_dim,
                                pos.data(), w.rope_inv_freq().data<float>(),
                                kernels::RopeStyle::half, true, s);
             },
             reps),
         nl);

  // Attention: prefill of 8 sequences x 256 from position 0 (forward), and its backward.
  {
    engine_cuda::DeviceKvCache cache(c, {.block_size = 16, .n_blocks = rows / 16 + n_seqs},
                                     engine_cuda::Precision::bf16);
    std::vector<engine_cuda::SeqId> ids;
    std::vector<int32_t> tables;
    std::vector<cuda::DeviceAttnSeq> aseqs;
    std::vector<kernels::DenseSeq> dense;
    for (int64_t i = 0; i < n_seqs; ++i) {
      ids.push_back(cache.create());
      std::vector<int64_t> slots;
      cache.append(ids.back(), seq_len, slots, s);
      const auto& tb = cache.block_table(ids.back());
      aseqs.push_back({.row_begin = i * seq_len,
                       .n_new = int32_t(seq_len),
                       .n_past = 0,
                       .table_offset = int32_t(tables.size())});
      tables.insert(tables.end(), tb.begin(), tb.end());
      dense.push_back({i * seq_len, seq_len});
    }
    cuda::DeviceBuffer<int32_t> d_tables(tables.size());
    d_tables.upload(tables);
    cuda::DeviceBuffer<cuda::DeviceAttnSeq> d_aseqs(aseqs.size());
    d_aseqs.upload(aseqs);
    cuda::DeviceBuffer<kernels::DenseSeq> d_dense(dense.size());
    d_dense.upload(dense);
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    const cuda::DevicePagedKv<bf16> kv = cache.layer<bf16>(0);
    // An attention op on the CUDA cores and on tensor cores (WMMA), side by side: both lines and
    // the ratio, or a note when the tensor cores do not apply to these operands.
    const auto both_paths = [&](const char* op, bool applies,
                                const std::function<void(bool tensor_cores)>& run) {
      double us[2] = {0.0, 0.0};
      for (const bool tensor_cores : {false, true}) {
        us[tensor_cores] = eager_us(
            s, [&] { run(tensor_cores); }, reps);
        report(std::string(op) + " (8 x 256" + (tensor_cores ? ", tensor cores)" : ", CUDA cores)"),
               us[tensor_cores], nl);
      }
      std::printf("gpu_train_ops/%s_cuda_cores_over_tensor_cores: %.2f  (%s)\n", op,
                  us[1] > 0 ? us[0] / us[1] : 0.0,
                  applies ? "8 x 256 tokens, one layer" : "tensor cores do not apply here");
    };
    // The prefill (the training forward's attention).
    both_paths("attention_prefill",
               cuda::attention_prefill_uses_tensor_cores<bf16>(x.data<bf16>(), c.q_dim(), kv),
               [&](bool tensor_cores) {
                 cuda::attention_prefill<bf16>(x.data<bf16>(), c.q_dim(), y.data<bf16>(), c.q_dim(),
                                               c.n_heads, kv, d_aseqs.data(), int32_t(n_seqs),
                                               d_tables.data(), int32_t(seq_len), int32_t(seq_len),
                                               scale, s, tensor_cores);
               });
    engine_cuda::DeviceTensor k(rows, c.kv_dim(), engine_cuda::Precision::bf16),
        v(rows, c.kv_dim(), engine_cuda::Precision::bf16),
        dk(rows, c.kv_dim(), engine_cuda::Precision::bf16),
        dv(rows, c.kv_dim(), engine_cuda::Precision::bf16);
    for (auto* t : {&k, &v}) t->zero(s);
    kernels::cuda::DeviceBuffer<unsigned char> attn_scratch(std::max<size_t>(
        1, cuda::attention_backward_scratch_bytes(int32_t(n_seqs), int32_t(seq_len), c.n_heads)));
    both_paths("attention_backward",
               cuda::attention_backward_uses_tensor_cores<bf16>(
                   x.data<bf16>(), k.data<bf16>(), v.data<bf16>(), y.data<bf16>(), dz.data<bf16>(),
                   dk.data<bf16>(), dv.data<bf16>(), c.head_dim),
               [&](bool tensor_cores) {
                 cuda::attention_backward<bf16>(
                     x.data<bf16>(), k.data<bf16>(), v.data<bf16>(), y.data<bf16>(),
                     dz.data<bf16>(), dk.data<bf16>(), dv.data<bf16>(), c.n_heads, c.n_kv_heads,
                     c.head_dim, d_dense.data(), int32_t(n_seqs), int32_t(seq_len), scale,
                     attn_scratch.data(), attn_scratch.size(), s, tensor_cores);
               });
    for (engine_cuda::SeqId id : ids) cache.release(id);
  }

  // The unembedding, one chunk of `chunk` rows: logits GEMM, log p of the targets, the loss
  // terms, dlogits in place and the unembedding's backward GEMM (d_hidden = dlogits·U).
  {
    std::vector<int32_t> tgt(static_cast<size_t>(chunk));
    for (int64_t r = 0; r < chunk; ++r) tgt[size_t(r)] = int32_t((r * 104729) % V);
    cuda::DeviceBuffer<int32_t> targets(static_cast<size_t>(chunk));
    targets.upload(tgt);
    cuda::DeviceBuffer<float> logp(static_cast<size_t>(chunk)), lse(static_cast<size_t>(chunk)),
        loss(static_cast<size_t>(chunk)), dlogp(static_cast<size_t>(chunk));
    cuda::DeviceBuffer<uint8_t> clipped(static_cast<size_t>(chunk));
    const engine_cuda::DeviceTensor& U = w.unembedding();
    report("unembed GEMM (chunk)",
           eager_us(
               s,
               [&] {
                 cuda::linear<bf16>(model.blas(), x.data<bf16>(), c.dim, chunk, c.dim,
                                    U.data<bf16>(), V, logits.data<bf16>(), V, 0.0f, s);
               },
               reps),
           n_chunks);
    report("target_logprobs (chunk)",
           eager_us(
               s,
               [&] {
                 cuda::target_logprobs<bf16>(logits.data<bf16>(), V, chunk, V, targets.data(),
                                             logp.data(), lse.data(), nullptr, s);
               },
               reps),
           n_chunks);
    report("token_losses (chunk)",
           eager_us(
               s,
               [&] {
                 cuda::token_losses({}, logp.data(), nullptr, nullptr, nullptr, chunk, loss.data(),
                                    dlogp.data(), clipped.data(), s);
               },
               reps),
           n_chunks);
    report("target_logprobs_backward (chunk)",
           eager_us(
               s,
               [&] {
                 cuda::target_logprobs_backward<bf16>(logits.data<bf16>(), V, chunk, V,
                                                      targets.data(), lse.data(), dlogp.data(),
                                                      logits.data<bf16>(), V, s);
               },
               reps),
           n_chunks);
    report("unembed backward GEMM (chunk)",
           eager_us(
               s,
               [&] {
                 cuda::gemm<bf16>(model.blas(), kernels::Trans::no, kernels::Trans::no, chunk,
                                  c.dim, V, 1.0f, logits.data<bf16>(), V, U.data<bf16>(), c.dim,
                                  0.0f, dz.data<bf16>(), c.dim, s);
               },
               reps),
           n_chunks);
  }
  std::printf(
      "  sum over one step's ops: %.1f ms (the forward's norms, rope, swiglu and the "
      "optimizer are not counted)\n",
      total / 1e3);
}

}  // namespace spindle::bench
