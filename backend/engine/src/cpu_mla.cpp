// The CPU ops of Multi-head Latent Attention (DeepSeek-V2/V3) for the decoder graph.
//
// Inference runs the absorbed form over the latent cache (each cached token is one row
// [ckv, k_pe] of kv_lora_rank + qk_rope_head_dim floats): per head, q̃ = [q_nope·W_UK, q_pe]
// attends over the cached rows as multi-query attention with one KV head, and the attended
// latent goes through W_UV. The LoRA of kv_b_proj (W + s·B·A) is absorbed the same way, in its
// factored form: q̃ += s·((q_nope·B_K)·A), out += s·B_V·(A·o_lat). Training forwards
// (keep_activations) run the uncompressed form over the new rows, k = [kv_b(ckv)_nope, k_pe],
// v = kv_b(ckv)_v, through the dense attention kernels (heads zero-padded to one width P), which
// the backward differentiates. The two forms compute the same function; tests compare them.

#include <algorithm>
#include <cstring>
#include <numeric>

#include "cpu_ops.h"
#include "spindle/kernels/matmul.h"

namespace spindle::engine::internal {

using kernels::Trans;

void CpuOps::copy_cols(const Tensor& src, int64_t c0, int64_t n, Tensor& dst) {
  const int64_t rows = src.dim(0);
  ensure(dst, {rows, n});
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst.row(r), src.row(r) + c0, size_t(n) * sizeof(float));
  }
}

void CpuOps::put_cols(const Tensor& src, Tensor& dst, int64_t c0) {
  for (int64_t r = 0; r < src.dim(0); ++r) {
    std::memcpy(dst.row(r) + c0, src.row(r), size_t(src.dim(1)) * sizeof(float));
  }
}

void CpuOps::mla_rope(Tensor& x, int64_t heads, bool inverse) {
  const int64_t dr = c_.mla.qk_rope_head_dim, w = x.dim(1) / heads, T = x.dim(0);
  const auto style =
      c_.mla.rope_interleave ? kernels::RopeStyle::interleaved : kernels::RopeStyle::half;
  for (int64_t h = 0; h < heads; ++h) {
    float* part = x.data() + h * w + (w - dr);
    kernels::rope(part, x.dim(1), T, 1, dr, st_.positions.data(), inv_freq_.data(), style, inverse);
    if (rope_factor_ == 1.0f) continue;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < dr; ++i) part[t * x.dim(1) + i] *= rope_factor_;
    }
  }
}

void CpuOps::mla_kv_write(int64_t l, const Tensor& ckv, const Tensor& k_pe) {
  const kernels::PagedKv kv = cache_->layer(l);
  const int64_t R = ckv.dim(1), dr = k_pe.dim(1), width = kv.head_dim;
  SPINDLE_CHECK(kv.n_kv_heads == 1 && width == R + dr, internal,
                "MLA: the KV cache is not a latent cache ({} x {})", kv.n_kv_heads, width);
  for (int64_t t = 0; t < st_.T; ++t) {
    float* row = kv.k + st_.cache_slots[size_t(t)] * width;
    std::memcpy(row, ckv.row(t), size_t(R) * sizeof(float));
    std::memcpy(row + R, k_pe.row(t), size_t(dr) * sizeof(float));
  }
}

void CpuOps::mla_attention(int64_t l, LayerActivations& a) {
  const LayerWeights& L = layer(l);
  const MlaDims d(c_);
  MlaActivations& m = a.mla;
  const int64_t T = st_.T;
  ensure(m.q_abs, {T, d.H * d.lw});
  ensure(m.o_lat, {T, d.H * d.lw});
  ensure(a.attn, {T, d.H * d.dv});
  // q̃[h] = [q_nope[h]·W_UK[h], q_pe[h]], W_UK[h] = kv_b rows h·kvw + [0, dn) ([dn, R]).
  for (int64_t h = 0; h < d.H; ++h) {
    kernels::gemm(Trans::no, Trans::no, T, d.R, d.dn, 1.0f, a.q.data() + h * d.qw, d.H * d.qw,
                  L.wkv_b.data() + h * d.kvw * d.R, d.R, 0.0f, m.q_abs.data() + h * d.lw,
                  d.H * d.lw);
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(m.q_abs.row(t) + h * d.lw + d.R, a.q.row(t) + h * d.qw + d.dn,
                  size_t(d.dr) * sizeof(float));
    }
  }
  const std::optional<kernels::LoraSlots> view = lora_ != nullptr && any_adapted(st_.segments)
                                                     ? lora_->view(l, LoraTarget::kv_b)
                                                     : std::nullopt;
  // The LoRA of kv_b, absorbed: q̃[h][:R] += s·(q_nope[h]·B_K[h])·A, row by row per slot.
  const kernels::LoraSlots none{};
  const kernels::LoraSlots& v = view ? *view : none;
  const int64_t mr = view ? v.max_rank : 0;
  std::vector<double> u(static_cast<size_t>(mr));
  auto for_adapted_rows = [&](auto&& fn) {
    for (const auto& seg : st_.segments) {
      if (seg.slot < 0) continue;
      const int64_t r = v.rank[seg.slot];
      if (r == 0) continue;
      const float* A = v.A + int64_t(seg.slot) * v.max_rank * v.d_in;
      const float* B = kernels::slot_b(v.B, v, seg.slot);  // [d_out, r], row stride r
      for (int64_t t = seg.row_begin; t < seg.row_end; ++t) fn(t, r, v.scale[seg.slot], A, B);
    }
  };
  if (view) {
    for_adapted_rows([&](int64_t t, int64_t r, float s, const float* A, const float* B) {
      for (int64_t h = 0; h < d.H; ++h) {
        const float* qn = a.q.row(t) + h * d.qw;
        std::fill(u.begin(), u.end(), 0.0);
        for (int64_t i = 0; i < d.dn; ++i) {
          const float* b = B + (h * d.kvw + i) * r;
          for (int64_t j = 0; j < r; ++j) u[size_t(j)] += double(qn[i]) * b[j];
        }
        float* qa = m.q_abs.row(t) + h * d.lw;
        for (int64_t j = 0; j < r; ++j) {
          const float c = float(s * u[size_t(j)]);
          const float* Aj = A + j * d.R;
          for (int64_t k = 0; k < d.R; ++k) qa[k] += c * Aj[k];
        }
      }
    });
  }
  // Multi-query attention over the cached latent rows: K = V = [ckv, k_pe].
  kernels::attention_paged(m.q_abs.data(), d.H * d.lw, m.o_lat.data(), d.H * d.lw, d.H,
                           cache_->layer(l), st_.attn_seqs, attn_scale_);
  // out[h] = W_UV[h]·o_lat[h][:R], W_UV[h] = kv_b rows h·kvw + dn + [0, dv) ([dv, R]).
  for (int64_t h = 0; h < d.H; ++h) {
    kernels::gemm(Trans::no, Trans::yes, T, d.dv, d.R, 1.0f, m.o_lat.data() + h * d.lw, d.H * d.lw,
                  L.wkv_b.data() + (h * d.kvw + d.dn) * d.R, d.R, 0.0f, a.attn.data() + h * d.dv,
                  d.H * d.dv);
  }
  if (view) {
    // out[h] += s·B_V[h]·(A·o_lat[h][:R]).
    for_adapted_rows([&](int64_t t, int64_t r, float s, const float* A, const float* B) {
      for (int64_t h = 0; h < d.H; ++h) {
        const float* o = m.o_lat.row(t) + h * d.lw;
        for (int64_t j = 0; j < r; ++j) {
          double acc = 0;
          const float* Aj = A + j * d.R;
          for (int64_t k = 0; k < d.R; ++k) acc += double(Aj[k]) * o[k];
          u[size_t(j)] = acc;
        }
        float* out = a.attn.row(t) + h * d.dv;
        for (int64_t i = 0; i < d.dv; ++i) {
          const float* b = B + (h * d.kvw + d.dn + i) * r;
          double acc = 0;
          for (int64_t j = 0; j < r; ++j) acc += double(b[j]) * u[size_t(j)];
          out[i] += float(s * acc);
        }
      }
    });
  }
}

void CpuOps::mla_attention_dense(int64_t, LayerActivations& a) {
  const MlaDims d(c_);
  MlaActivations& m = a.mla;
  const int64_t T = st_.T, W = d.H * d.P;
  for (Tensor* t : {&m.q_p, &m.k_p, &m.v_p, &m.attn_p}) {
    ensure(*t, {T, W});
    t->fill(0.0f);
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < d.H; ++h) {
      const float* kv = m.kv.row(t) + h * d.kvw;
      std::memcpy(m.q_p.row(t) + h * d.P, a.q.row(t) + h * d.qw, size_t(d.qw) * sizeof(float));
      std::memcpy(m.k_p.row(t) + h * d.P, kv, size_t(d.dn) * sizeof(float));
      std::memcpy(m.k_p.row(t) + h * d.P + d.dn, m.k_pe.row(t), size_t(d.dr) * sizeof(float));
      std::memcpy(m.v_p.row(t) + h * d.P, kv + d.dn, size_t(d.dv) * sizeof(float));
    }
  }
  // The new rows as a cache of one-token blocks: block b is row b.
  dense_rows_.resize(size_t(T));
  std::iota(dense_rows_.begin(), dense_rows_.end(), 0);
  std::vector<kernels::AttnSeq> seqs = st_.attn_seqs;
  for (auto& s : seqs) {
    SPINDLE_CHECK(s.n_past == 0, unsupported,
                  "MLA: a forward that keeps activations (training, scoring for a backward) "
                  "needs sequences from position 0; this one has {} cached tokens",
                  s.n_past);
    s.block_table = dense_rows_.data() + s.row_begin;
  }
  const kernels::PagedKv dense{m.k_p.data(), m.v_p.data(), T, 1, d.H, d.P};
  kernels::attention_paged(m.q_p.data(), W, m.attn_p.data(), W, d.H, dense, seqs, attn_scale_);
  ensure(a.attn, {T, d.H * d.dv});
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < d.H; ++h) {
      std::memcpy(a.attn.row(t) + h * d.dv, m.attn_p.row(t) + h * d.P,
                  size_t(d.dv) * sizeof(float));
    }
  }
}

void CpuOps::mla_attention_dense_backward(const LayerActivations& a, const Tensor& d_attn,
                                          Tensor& dq, Tensor& dkv, Tensor& dk_pe) {
  const MlaDims d(c_);
  const MlaActivations& m = a.mla;
  const int64_t T = st_.T, W = d.H * d.P;
  for (Tensor* t : {&mla_d_attn_p_, &mla_dq_p_, &mla_dk_p_, &mla_dv_p_}) ensure(*t, {T, W});
  mla_d_attn_p_.fill(0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < d.H; ++h) {
      std::memcpy(mla_d_attn_p_.row(t) + h * d.P, d_attn.row(t) + h * d.dv,
                  size_t(d.dv) * sizeof(float));
    }
  }
  kernels::attention_backward(m.q_p.data(), m.k_p.data(), m.v_p.data(), mla_d_attn_p_.data(),
                              mla_dq_p_.data(), mla_dk_p_.data(), mla_dv_p_.data(), d.H, d.H, d.P,
                              dense_, attn_scale_);
  dk_pe.fill(0.0f);
  for (int64_t t = 0; t < T; ++t) {
    float* pe = dk_pe.row(t);
    for (int64_t h = 0; h < d.H; ++h) {
      const float* dkp = mla_dk_p_.row(t) + h * d.P;
      float* kv = dkv.row(t) + h * d.kvw;
      std::memcpy(dq.row(t) + h * d.qw, mla_dq_p_.row(t) + h * d.P, size_t(d.qw) * sizeof(float));
      std::memcpy(kv, dkp, size_t(d.dn) * sizeof(float));
      std::memcpy(kv + d.dn, mla_dv_p_.row(t) + h * d.P, size_t(d.dv) * sizeof(float));
      for (int64_t i = 0; i < d.dr; ++i) pe[i] += dkp[d.dn + i];
    }
  }
}

}  // namespace spindle::engine::internal
