// llama2.c "legacy" (version 0) checkpoints: a 7 x int32 header, then fp32 tensors stacked
// over layers, then two RoPE tables (skipped), then the classifier when vocab_size < 0.
// The file size must match the header exactly; it is checked before anything is allocated.

#include <array>
#include <cstring>

#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/loader.h"

namespace spindle::engine {
namespace {

constexpr uint64_t kHeaderBytes = 7 * 4;
constexpr int32_t kVersionedMagic = 0x616b3432;  // "ak42": llama2.c export versions 1 and 2

// One contiguous run of fp32 values in the file: `count` tensors of `shape`, back to back.
struct Section {
  const char* name;  // llama2.c's name for it
  int64_t count;     // 1, or n_layers for stacked per-layer tensors
  Shape shape;
  uint64_t offset = 0;  // byte offset in the file

  uint64_t bytes() const { return uint64_t(count) * uint64_t(shape_numel(shape)) * 4; }
};

enum SectionId {
  kTokEmb,
  kRmsAtt,
  kWq,
  kWk,
  kWv,
  kWo,
  kRmsFfn,
  kW1,
  kW2,
  kW3,
  kRmsFinal,
  kFreqReal,
  kFreqImag,
  kWcls
};

std::vector<Section> layout(const ModelConfig& c) {
  const int64_t L = c.n_layers;
  std::vector<Section> s = {
      {"token_embedding_table", 1, {c.vocab_size, c.dim}},
      {"rms_att_weight", L, {c.dim}},
      {"wq", L, {c.q_dim(), c.dim}},
      {"wk", L, {c.kv_dim(), c.dim}},
      {"wv", L, {c.kv_dim(), c.dim}},
      {"wo", L, {c.dim, c.q_dim()}},
      {"rms_ffn_weight", L, {c.dim}},
      {"w1", L, {c.hidden_dim, c.dim}},
      {"w2", L, {c.dim, c.hidden_dim}},
      {"w3", L, {c.hidden_dim, c.dim}},
      {"rms_final_weight", 1, {c.dim}},
      {"freq_cis_real", 1, {c.max_seq_len, c.head_dim / 2}},
      {"freq_cis_imag", 1, {c.max_seq_len, c.head_dim / 2}},
  };
  if (!c.tie_embeddings) s.push_back({"wcls", 1, {c.vocab_size, c.dim}});
  uint64_t off = kHeaderBytes;
  for (auto& sec : s) {
    sec.offset = off;
    off += sec.bytes();
  }
  return s;
}

ModelConfig parse_header(const FileReader& file) {
  const std::string src = file.path().string();
  SPINDLE_CHECK(file.size() >= kHeaderBytes, format,
                "{}: {} bytes, too short for the {}-byte llama2.c header (hint: is this a "
                "llama2.c checkpoint?)",
                src, file.size(), kHeaderBytes);
  std::array<int32_t, 7> h{};
  file.read_at(0, h.data(), kHeaderBytes);
  SPINDLE_CHECK(h[0] != kVersionedMagic, unsupported,
                "{}: llama2.c export version 1/2 (magic 'ak42') is not supported; export with "
                "--version 0 (the legacy format)",
                src);
  static constexpr const char* kFields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                             "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    const bool ok = i == 5 ? h[i] != 0 : h[i] > 0;
    SPINDLE_CHECK(ok, format,
                  "{}: llama2.c header field {} is {}, expected a {} integer (hint: is this a "
                  "llama2.c checkpoint?)",
                  src, kFields[i], h[i], i == 5 ? "non-zero" : "positive");
  }
  ModelConfig c;
  c.arch = Arch::llama;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.vocab_size = h[5] < 0 ? -int64_t(h[5]) : int64_t(h[5]);
  c.tie_embeddings = h[5] > 0;  // negative vocab: an untied classifier follows the RoPE tables
  c.max_seq_len = h[6];
  SPINDLE_CHECK(c.dim % c.n_heads == 0, format,
                "{}: llama2.c header: dim {} is not a multiple of n_heads {}", src, c.dim,
                c.n_heads);
  c.head_dim = c.dim / c.n_heads;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  c.bos_id = 1;
  c.eos_id = 2;
  c.name = src;
  c.validate(src);  // bounds every size, so the layout arithmetic below cannot overflow
  return c;
}

void check_size(const FileReader& file, const ModelConfig& c, const std::vector<Section>& secs) {
  const std::string src = file.path().string();
  const uint64_t want = secs.back().offset + secs.back().bytes();
  const uint64_t have = file.size();
  if (have < want) {
    const Section* cut = &secs.back();
    for (const auto& s : secs) {
      if (s.offset + s.bytes() > have) {
        cut = &s;
        break;
      }
    }
    SPINDLE_THROW(format,
                  "{}: truncated: {} bytes missing (file has {}, the header dim {}, hidden {}, "
                  "layers {}, heads {}, kv heads {}, vocab {}, seq_len {} needs {}); tensor '{}' "
                  "at offset {} is incomplete",
                  src, want - have, have, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                  c.tie_embeddings ? c.vocab_size : -c.vocab_size, c.max_seq_len, want, cut->name,
                  cut->offset);
  }
  SPINDLE_CHECK(have == want, format,
                "{}: {} trailing bytes after the last tensor (file has {}, the header needs "
                "exactly {}){}",
                src, have - want, have, want,
                c.tie_embeddings && have - want == uint64_t(c.vocab_size * c.dim * 4)
                    ? "; hint: the extra bytes fit a classifier: should vocab_size be negative?"
                    : "; hint: is this a llama2.c version-0 checkpoint?");
}

// Reads section item `index` (a layer, or 0) straight into a new tensor.
Tensor read_item(const FileReader& file, const Section& s, int64_t index) {
  Tensor t(s.shape);
  file.read_at(s.offset + uint64_t(index) * t.bytes(), t.data(), t.bytes());
  return t;
}

// llama2.c rotates interleaved pairs (2i, 2i+1) of each head; the engine rotates halves
// (i, i + hd/2). Within each head: HF row i = llama2.c row 2i, HF row i + hd/2 = row 2i + 1.
Tensor permute_to_half(const Tensor& w, int64_t n_heads, int64_t head_dim) {
  Tensor out(w.shape());
  const int64_t cols = w.dim(1);
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      const int64_t base = h * head_dim;
      std::memcpy(out.row(base + i), w.row(base + 2 * i), size_t(cols) * 4);
      std::memcpy(out.row(base + half + i), w.row(base + 2 * i + 1), size_t(cols) * 4);
    }
  }
  return out;
}

}  // namespace

ModelWeights load_llama2c(const std::filesystem::path& path) {
  const FileReader file(path);
  ModelWeights w;
  w.config = parse_header(file);
  const ModelConfig& c = w.config;
  const std::vector<Section> secs = layout(c);
  check_size(file, c, secs);

  w.tok_emb = read_item(file, secs[kTokEmb], 0);
  w.layers.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    L.attn_norm = read_item(file, secs[kRmsAtt], l);
    L.wq = permute_to_half(read_item(file, secs[kWq], l), c.n_heads, c.head_dim);
    L.wk = permute_to_half(read_item(file, secs[kWk], l), c.n_kv_heads, c.head_dim);
    L.wv = read_item(file, secs[kWv], l);
    L.wo = read_item(file, secs[kWo], l);
    L.ffn_norm = read_item(file, secs[kRmsFfn], l);
    L.w_gate = read_item(file, secs[kW1], l);
    L.w_down = read_item(file, secs[kW2], l);
    L.w_up = read_item(file, secs[kW3], l);
  }
  w.final_norm = read_item(file, secs[kRmsFinal], 0);
  if (!c.tie_embeddings) w.lm_head = read_item(file, secs[kWcls], 0);
  w.validate(path.string());
  return w;
}

}  // namespace spindle::engine
