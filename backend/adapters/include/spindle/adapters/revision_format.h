#pragma once
// The file format of one policy revision: a safetensors file holding the PEFT tensors of a
// LoraWeights (same keys as adapter_model.safetensors: "...layers.<i>.self_attn.q_proj.
// lora_A.weight" [r, d_in], "...lora_B.weight" [d_out, r]) plus Spindle's metadata in
// "__metadata__":
//   spindle.format = "lora-revision", spindle.format_version = "1",
//   spindle.base_model, spindle.base_checksum, spindle.rank, spindle.alpha (shortest
//   round-trip decimal), spindle.use_rslora ("true"/"false"), spindle.targets (comma list of
//   PEFT module names, kAllLoraTargets order), spindle.n_layers, spindle.dtype ("F32", ...).
// Encoding is deterministic (sorted keys, name-ordered data, header padded with spaces to 8
// bytes), so equal weights and metadata give equal bytes and the blob store keeps one copy.
// Any safetensors reader (and PEFT, after renaming the file) reads the tensors.

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/adapters/peft.h"
#include "spindle/adapters/sha256.h"
#include "spindle/core/file_io.h"
#include "spindle/core/dtype.h"
#include "spindle/engine/lora.h"

namespace spindle::adapters {

struct RevisionMeta {
  std::string base_model_id;  // catalog id of the base the adapter was trained on
  std::string base_checksum;  // that base's checksum as the catalog records it
  int64_t rank = 0;
  float alpha = 0.0f;
  bool use_rslora = false;
  std::vector<engine::LoraTarget> targets;  // adapted targets, kAllLoraTargets order
  int64_t n_layers = 0;                     // weights.modules.size()
  DType dtype = DType::f32;                 // tensor dtype on disk: f32, f16 or bf16
};

struct RevisionBase {
  std::string base_model_id;
  std::string base_checksum;
  DType dtype = DType::f32;
};

// Metadata describing `weights` (rank, alpha, rsLoRA, adapted targets, layers) on `base`.
RevisionMeta revision_meta_for(const engine::LoraWeights& weights, const RevisionBase& base);

// Serialises weights + meta. Throws invalid_argument when meta disagrees with the weights
// (rank, alpha, rsLoRA, targets, layers) or a tensor has the wrong rank dimension, and
// unsupported for a non-floating dtype.
std::string encode_revision(const engine::LoraWeights& weights, const RevisionMeta& meta);
// The same bytes handed to `write(data, n)` in order, without building them in memory (f32
// tensors go straight from the weights). The same checks, made before the first write. Safe
// to run on several threads at once over the same weights: the stream is deterministic.
void stream_revision(const engine::LoraWeights& weights, const RevisionMeta& meta,
                     const std::function<void(const void* data, size_t n)>& write);

struct DecodedRevision {
  engine::LoraWeights weights;
  RevisionMeta meta;
};

// Parses and checks a revision file (every tensor is an expected A/B pair of the declared
// rank; nothing missing, nothing extra). Throws format naming `source` and what is wrong.
DecodedRevision decode_revision(std::string_view bytes, const std::string& source);
// decode_revision from an open file without holding the whole blob: the header, then each
// large F32 tensor read straight into its own memory (no intermediate copy) and small tensors
// in a few staged reads of up to 4 MiB, every byte of the file fed to `digest` in file order
// when non-null (the caller compares the digest: BlobStore::get_revision). Same checks and
// messages as decode_revision.
DecodedRevision read_revision_file(const FileReader& file, const std::string& source,
                                   Sha256* digest = nullptr);
// Metadata only (header parse; tensor data is not read).
RevisionMeta decode_revision_meta(std::string_view bytes, const std::string& source);

// A PEFT directory read without a base model: the config plus tensors checked only for
// internal consistency (A/B pairs complete, A [r, d_in], B [d_out, r], targets as configured).
// Use load_peft() when the base's ModelConfig is known; it validates every shape against it.
struct PeftImport {
  PeftConfig config;
  engine::LoraWeights weights;
};
PeftImport read_peft_dir(const std::filesystem::path& dir);

}  // namespace spindle::adapters
