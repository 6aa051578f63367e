#pragma once
// What a GPU forward produced: the twin of engine::ForwardState (engine/model.h), with every
// tensor in device memory. Field names match the CPU's LayerActivations / ForwardState, so a
// backward pass written against the CPU engine reads the same names here.
//
// dtypes: activations are the model's Precision (T = float or bf16); tensors marked fp32 are
// fp32 in both modes (norm statistics, LoRA scratch). Shapes are [rows, cols] as noted.
// Host-side tables (positions, tokens, segments, ...) are kept next to their device mirrors,
// which hold the same values (packed into one pinned staging buffer and copied on the model's
// stream during the forward).
//
// Threading: one engine loop owns a state; it is reused across forwards (memory grows, never
// shrinks) and must not be shared between DeviceModels running concurrently.

#include <cstdint>
#include <vector>

#include "spindle/core/tensor.h"
#include "spindle/engine/moe_routing.h"
#include "spindle/engine_cuda/device_tensor.h"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/lora.h"

namespace spindle::engine_cuda {

// Routed experts' intermediates over T rows (engine::MoeActivations): the router's logits on
// the device, the choice made on the host (engine::route_experts, the CPU engine's code) and
// its tables uploaded; rows of xg/gate/up/act/out in the routing's sorted order.
struct DeviceMoeActivations {
  DeviceTensor logits;         // [T, n_experts] router logits (model dtype)
  std::vector<float> probs;    // [T, n_experts] host
  std::vector<float> weight;   // [T·top_k] host, by assignment j
  engine::MoeRouting routing;  // host
  kernels::cuda::DeviceBuffer<int32_t> d_rows;  // [T·top_k] token row of each sorted assignment
  kernels::cuda::DeviceBuffer<int32_t> d_pos;   // [T, top_k] token t's sorted rows, ascending
  kernels::cuda::DeviceBuffer<float> d_weight;  // [T, top_k] their combine weights
  kernels::cuda::DeviceBuffer<float> d_weight_sorted;  // [T·top_k] by sorted row (training)
  kernels::cuda::DeviceBuffer<kernels::LoraSegment> d_lora_segs;  // routing.lora_segs
  DeviceTensor xg;             // [T·top_k, dim]
  DeviceTensor gate, up, act;  // [T·top_k, expert_dim]
  DeviceTensor out;            // [T·top_k, dim] the experts' outputs (before the weights)
};

// Multi-head Latent Attention's intermediates (engine::MlaActivations; model dtype unless
// marked): H heads, Q = q_lora_rank, R = kv_lora_rank, P = max(dn + dr, dv).
struct DeviceMlaActivations {
  DeviceTensor q_lat;       // [T, Q] q_a_proj(xn)                        (Q > 0)
  DeviceTensor q_latn;      // [T, Q] q_a_layernorm(q_lat)
  DeviceTensor inv_rms_q;   // [T, 1] fp32
  DeviceTensor kv_lat;      // [T, R + dr] kv_a_proj_with_mqa(xn)
  DeviceTensor c_raw;       // [T, R] its latent columns
  DeviceTensor ckv;         // [T, R] kv_a_layernorm(c_raw): cached, with k_pe
  DeviceTensor inv_rms_kv;  // [T, 1] fp32
  DeviceTensor k_pe;        // [T, dr] the shared rope key, rotated
  // The uncompressed form (keep_activations forwards; the backward reads it):
  DeviceTensor kv;                       // [T, H·(dn+dv)] kv_b_proj(ckv)
  DeviceTensor q_p, k_p, v_p, attn_p;    // [T, H·P] per head, zero-padded
  // The absorbed form over the latent cache (inference):
  DeviceTensor q_abs;  // [T, H·(R+dr)] per head [q_nope·W_UK (+ kv_b's LoRA), q_pe]
  DeviceTensor o_lat;  // [T, H·(R+dr)] attention over the cached [ckv, k_pe] rows
};

// Intermediates of one decoder layer over the batch's T rows (as engine::LayerActivations).
struct DeviceLayerActivations {
  DeviceTensor x_in;          // [T, dim] residual stream entering the layer (keep_activations)
  DeviceTensor xn_attn;       // [T, dim] after attn_norm
  DeviceTensor inv_rms_attn;  // [T, 1] fp32
  DeviceTensor q_pre;         // [T, q_dim] before q_norm (Qwen3, keep_activations only)
  DeviceTensor k_pre;         // [T, kv_dim] before k_norm (Qwen3, keep_activations only)
  DeviceTensor inv_rms_q;     // [T·n_heads, 1] fp32 (Qwen3, keep_activations only)
  DeviceTensor inv_rms_k;     // [T·n_kv_heads, 1] fp32 (Qwen3, keep_activations only)
  DeviceTensor q;             // [T, q_dim] after (q_norm and) RoPE
  DeviceTensor k;             // [T, kv_dim] after (k_norm and) RoPE
  DeviceTensor v;             // [T, kv_dim]
  DeviceTensor attn;          // [T, q_dim] attention output before o_proj
  DeviceTensor x_mid;         // [T, dim] residual after attention (keep_activations)
  DeviceTensor xn_mlp;        // [T, dim] after ffn_norm
  DeviceTensor inv_rms_mlp;   // [T, 1] fp32
  DeviceTensor gate;          // [T, hidden]
  DeviceTensor up;            // [T, hidden]
  DeviceTensor act;           // [T, hidden] silu(gate)·up
  DeviceMoeActivations moe;   // sparse layers (gate/up/act above hold shared experts, if any)
  DeviceMlaActivations mla;   // latent attention (q, attn above: [T, H·(dn+dr)], [T, H·dv])
};

// A typed view of device memory owned elsewhere (DeviceForwardState::tables).
template <class T>
struct DeviceTable {
  T* ptr = nullptr;
  T* data() const { return ptr; }
};

struct DeviceForwardState {
  int64_t T = 0;                  // rows (new tokens) in the batch
  int64_t rows_out = 0;           // logits / x_final rows (sequences, or T for all-token rows)
  bool keep_activations = false;  // as the last forward was run
  bool all_tokens = false;        // all_tokens or hidden_only

  // Host tables of the last forward (same meaning as engine::ForwardState's).
  std::vector<int32_t> positions;                   // [T]
  std::vector<int32_t> tokens;                      // [T] input tokens
  std::vector<int64_t> cache_slots;                 // [T] flat KV slots
  std::vector<kernels::LoraSegment> segments;       // over all T rows
  std::vector<kernels::LoraSegment> out_segments;   // over the rows_out rows
  std::vector<kernels::cuda::DeviceAttnSeq> attn_seqs;  // [n_seqs]
  std::vector<int32_t> block_tables;                // concatenated; attn_seqs[i].table_offset
  std::vector<int32_t> last_rows;                   // [n_seqs] last row of each sequence
  std::vector<int32_t> slots_used;                  // distinct adapter slots >= 0 in the batch

  // Device mirrors of the tables above: views into `tables`' device buffer, valid until the
  // next forward with this state (one packed H2D copy per forward, see TableStaging).
  DeviceTable<int32_t> d_positions;
  DeviceTable<int32_t> d_tokens;
  DeviceTable<int64_t> d_cache_slots;
  DeviceTable<kernels::LoraSegment> d_segments;
  DeviceTable<kernels::LoraSegment> d_out_segments;
  DeviceTable<kernels::cuda::DeviceAttnSeq> d_attn_seqs;
  DeviceTable<int32_t> d_last_rows;
  DeviceTable<int32_t> d_block_tables;  // packed last (its length varies step to step)
  TableStaging tables;
  // Attention launch bounds: max n_new and the max_ctx passed to the kernel (the real maximum,
  // or a graph's context bucket, which is larger).
  int32_t attn_max_new = 0;
  int32_t attn_max_ctx = 0;

  // n_layers entries with keep_activations, else 1 (reused by every layer).
  std::vector<DeviceLayerActivations> layers;
  DeviceTensor x_last;         // [T, dim] the residual stream; after the forward, the residual
                               // after the last layer (kept in both modes)
  DeviceTensor x_gather;       // [rows_out, dim] last rows of each sequence (last_token only)
  DeviceTensor inv_rms_final;  // [rows_out, 1] fp32
  DeviceTensor x_final;        // [rows_out, dim] after the final norm
  DeviceTensor logits;         // [rows_out, vocab] (not written for hidden_only)
  DeviceTensor lora_h;         // [T, max_rank] fp32 SGMV scratch
  DeviceTensor lora_dh;        // [T, max_rank] fp32 backward scratch (the backward's to use)
  DeviceTensor attn_scratch;   // fp32 split-KV decode partials (cuda::attention_scratch_bytes)
  DeviceTensor mla_latent;     // [T, R + dr] MLA's [ckv, k_pe] rows on their way to the cache
  // MLA's uncompressed training attention: the new rows as one-token blocks (identity table)
  // and its sequences from position 0.
  kernels::cuda::DeviceBuffer<int32_t> mla_dense_rows;
  kernels::cuda::DeviceBuffer<kernels::cuda::DeviceAttnSeq> mla_dense_seqs;

  // The logits copied to the host as fp32 [rows_out, vocab] when the forward was asked to
  // (DeviceForwardOptions::copy_logits); empty otherwise.
  Tensor host_logits;
};

}  // namespace spindle::engine_cuda
