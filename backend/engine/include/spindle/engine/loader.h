#pragma once
// Base model loaders. Every loader validates shapes and dtypes before allocating and throws
// spindle::Error naming the file and the tensor ("hint: ..." where a likely cause is known).
// Weights are read (pread, once) into memory the process owns and converted to fp32.

#include <filesystem>
#include <string>

#include "spindle/core/dtype.h"
#include "spindle/engine/weights.h"

namespace spindle::engine {

// An HF directory (config.json + model.safetensors or model.safetensors.index.json) or a
// llama2.c checkpoint file (.bin). Dispatches on what the path is.
ModelWeights load_model(const std::filesystem::path& path);

ModelWeights load_hf_dir(const std::filesystem::path& dir);

// llama2.c: 7 int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size —
// negative means an untied classifier at the end — seq_len), then fp32 tensors stacked over
// layers. q/k rows are permuted from the interleaved to the half RoPE layout on load.
ModelWeights load_llama2c(const std::filesystem::path& file);

// Parses HF config.json text ("llama" and "qwen3" model types). `source` names the file.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& source);
std::string hf_config_json(const ModelConfig& config);

// Writes an HF directory: config.json and model.safetensors (tensors in `dtype`).
// Written atomically per file (temp file, fsync, rename).
void save_hf_dir(const ModelWeights& weights, const std::filesystem::path& dir,
                 DType dtype = DType::f32);

}  // namespace spindle::engine
