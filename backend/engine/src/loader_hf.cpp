// Hugging Face directory loader: config.json + model.safetensors, or a sharded
// model.safetensors.index.json. Every expected tensor is checked (present, floating dtype,
// shape) before any tensor data is allocated or read.

#include <algorithm>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/safetensors.h"

namespace spindle::engine {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxConfigBytes = size_t(16) << 20;
constexpr size_t kMaxIndexBytes = size_t(64) << 20;

// Filesystem queries that answer false instead of throwing std::filesystem_error.
bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}
bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// Tensor names from a file go into messages clipped: a hostile header may hold huge keys.
std::string clip(const std::string& name) {
  return name.size() <= 120 ? name : name.substr(0, 120) + "...";
}

struct Located {
  const SafetensorsFile* file;
  const SafetensorsEntry* entry;
};

// All tensors of a checkpoint, by name, across its shards. Files live in a deque so the
// pointers in `tensors` stay valid.
struct Checkpoint {
  std::string where;  // what messages name: the .safetensors file or the index
  std::deque<SafetensorsFile> files;
  std::map<std::string, Located> tensors;

  void add_file(const fs::path& path) {
    const SafetensorsFile& f = files.emplace_back(path);
    for (const auto& e : f.entries()) {
      auto [it, inserted] = tensors.emplace(e.name, Located{&f, &e});
      SPINDLE_CHECK(inserted, format, "{}: tensor '{}' appears in both {} and {}", where,
                    clip(e.name), it->second.file->path().filename().string(),
                    path.filename().string());
    }
  }
};

Checkpoint open_index(const fs::path& dir, const fs::path& index_path) {
  Checkpoint ck;
  ck.where = index_path.string();
  json j;
  try {
    j = json::parse(read_file_to_string(index_path, kMaxIndexBytes));
  } catch (const json::exception& ex) {
    SPINDLE_THROW(format, "{}: not valid JSON: {}", ck.where, ex.what());
  }
  SPINDLE_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), format,
                "{}: expected an object with a 'weight_map' object", ck.where);
  const json& map = j["weight_map"];
  std::map<std::string, std::string> placement;  // tensor -> shard file name
  for (const auto& [tensor, shard] : map.items()) {
    SPINDLE_CHECK(shard.is_string(), format, "{}: weight_map['{}'] must be a file name, got {}",
                  ck.where, clip(tensor), clip(shard.dump()));
    const std::string file = shard.get<std::string>();
    const fs::path rel(file);
    SPINDLE_CHECK(
        !file.empty() && rel.has_filename() && rel == rel.filename() && file != ".." && file != ".",
        format, "{}: weight_map['{}'] = '{}' must name a file in the model directory", ck.where,
        clip(tensor), clip(file));
    placement.emplace(tensor, file);
  }
  SPINDLE_CHECK(!placement.empty(), format, "{}: weight_map is empty", ck.where);
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& [tensor, file] : placement) {
    if (shards.count(file)) continue;
    const fs::path p = dir / file;
    SPINDLE_CHECK(path_exists(p), not_found,
                  "{}: shard '{}' (listed for tensor '{}') is missing: {} does not exist", ck.where,
                  clip(file), clip(tensor), p.string());
    ck.add_file(p);
    shards.emplace(file, &ck.files.back());
  }
  for (const auto& [tensor, file] : placement) {
    auto it = ck.tensors.find(tensor);
    SPINDLE_CHECK(it != ck.tensors.end() && it->second.file == shards.at(file), format,
                  "{}: weight_map puts tensor '{}' in '{}', but that shard has no such tensor",
                  ck.where, clip(tensor), clip(file));
  }
  return ck;
}

Checkpoint open_checkpoint(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (path_exists(single)) {
    Checkpoint ck;
    ck.where = single.string();
    ck.add_file(single);
    return ck;
  }
  if (path_exists(index)) return open_index(dir, index);
  SPINDLE_THROW(not_found,
                "{}: neither model.safetensors nor model.safetensors.index.json is there (hint: "
                "only safetensors checkpoints load; convert pytorch_model.bin first)",
                dir.string());
}

struct Expected {
  std::string name;
  Shape shape;
  Tensor* dst;
};

// The layout of for_each_hf_tensor_shape (weights.h), sized from the config before the
// tensors exist.
std::vector<Expected> expected_tensors(ModelWeights& w) {
  const ModelConfig& c = w.config;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    if (c.sparse_layer(int64_t(i))) w.layers[i].experts.resize(size_t(c.moe.n_experts));
  }
  std::vector<Expected> out;
  for_each_hf_tensor_shape(w, [&](const std::string& name, Tensor& t, const Shape& shape) {
    out.push_back({name, shape, &t});
  });
  return out;
}

std::string config_summary(const ModelConfig& c) {
  std::string s = fmt::format(
      "{}: hidden_size {}, intermediate_size {}, layers {}, heads {}, kv heads {}, "
      "head_dim {}, vocab {}",
      arch_name(c.arch), c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
      c.vocab_size);
  if (c.mla_attention()) {
    s += fmt::format(", MLA (q_lora_rank {}, kv_lora_rank {}, qk_nope/rope/v {}/{}/{})",
                     c.mla.q_lora_rank, c.mla.kv_lora_rank, c.mla.qk_nope_head_dim,
                     c.mla.qk_rope_head_dim, c.mla.v_head_dim);
  }
  if (c.moe.n_experts > 0) {
    s += fmt::format(", experts {} (top {}, moe_intermediate_size {})", c.moe.n_experts,
                     c.moe.top_k, c.moe.expert_dim);
  }
  return s;
}

void check_expected(const Checkpoint& ck, const std::vector<Expected>& want, const ModelConfig& c,
                    const std::string& config_path) {
  size_t n_missing = 0;
  const Expected* first_missing = nullptr;
  for (const auto& e : want) {
    if (!ck.tensors.count(e.name)) {
      ++n_missing;
      if (!first_missing) first_missing = &e;
    }
  }
  if (first_missing) {
    std::string hint = "hint: maybe wrong base model or architecture?";
    if (first_missing->name == "lm_head.weight" && n_missing == 1) {
      hint = "hint: config.json says tie_word_embeddings is false; should it be true?";
    }
    SPINDLE_THROW(not_found,
                  "{}: tensor '{}' not found (expected shape {}); {} of {} expected "
                  "tensors missing for {} ({}); {}",
                  ck.where, first_missing->name, shape_str(first_missing->shape), n_missing,
                  want.size(), config_path, config_summary(c), hint);
  }
  for (const auto& e : want) {
    const Located& at = ck.tensors.at(e.name);
    const auto dt = at.entry->known_dtype;
    SPINDLE_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16, format,
                  "{}: tensor '{}' has dtype {}, expected F32, F16 or BF16",
                  at.file->path().string(), e.name, at.entry->dtype);
    SPINDLE_CHECK(at.entry->shape == e.shape, format,
                  "{}: tensor '{}' has shape {}, expected {} from {} ({}); hint: maybe wrong base "
                  "model, or config.json does not belong to these weights?",
                  at.file->path().string(), e.name, shape_str(at.entry->shape), shape_str(e.shape),
                  config_path, config_summary(c));
  }
}

void check_unknown(const Checkpoint& ck, const std::vector<Expected>& want, const ModelConfig& c) {
  std::set<std::string> known;
  for (const auto& e : want) known.insert(e.name);
  std::vector<std::string> unknown;
  bool has_qk_norm = false;
  // DeepSeek's multi-token-prediction modules sit after the last layer (model.layers.61.* in
  // DeepSeek-V3): not part of the causal LM, skipped as transformers skips them.
  std::vector<std::string> mtp;
  for (int64_t i = 0; i < c.mtp_layers; ++i) {
    mtp.push_back(fmt::format("model.layers.{}.", c.n_layers + i));
  }
  for (const auto& [name, at] : ck.tensors) {
    if (known.count(name) || name.ends_with(".rotary_emb.inv_freq")) continue;
    if (std::any_of(mtp.begin(), mtp.end(),
                    [&](const std::string& p) { return name.starts_with(p); })) {
      continue;
    }
    if (c.tie_embeddings && name == "lm_head.weight") continue;  // a stray copy of embed_tokens
    has_qk_norm = has_qk_norm || name.ends_with("q_norm.weight");
    unknown.push_back(name);
  }
  if (unknown.empty()) return;
  std::string list;
  for (size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", " : "") + clip(unknown[i]);
  if (unknown.size() > 5) list += fmt::format(", ... ({} more)", unknown.size() - 5);
  SPINDLE_THROW(format,
                "{}: {} unexpected tensor(s) for a {} model: {}; hint: maybe wrong base "
                "model or architecture?{}",
                ck.where, unknown.size(), arch_name(c.arch), list,
                has_qk_norm && !c.qk_norm() ? " (q_norm/k_norm suggest model_type qwen3)" : "");
}

}  // namespace

ModelWeights load_hf_dir(const fs::path& dir) {
  SPINDLE_CHECK(is_dir(dir), not_found, "{}: not a directory", dir.string());
  const fs::path config_path = dir / "config.json";
  SPINDLE_CHECK(path_exists(config_path), not_found,
                "{}: config.json is missing (hint: an HF model directory holds config.json and "
                "model.safetensors)",
                dir.string());
  ModelWeights w;
  w.config =
      parse_hf_config(read_file_to_string(config_path, kMaxConfigBytes), config_path.string());
  w.config.name = dir.string();
  w.layers.resize(size_t(w.config.n_layers));

  const Checkpoint ck = open_checkpoint(dir);
  std::vector<Expected> want = expected_tensors(w);
  check_expected(ck, want, w.config, config_path.string());
  check_unknown(ck, want, w.config);
  for (const auto& e : want) {
    const Located& at = ck.tensors.at(e.name);
    *e.dst = at.file->read_f32(*at.entry);
  }
  w.validate(ck.where);
  return w;
}

}  // namespace spindle::engine
