#pragma once
// Private to the loaders: HF config.json as a JSON object, for writers that add fields
// (torch_dtype) before serialising.

#include <nlohmann/json.hpp>

#include "spindle/core/dtype.h"
#include "spindle/engine/model_config.h"

namespace spindle::engine::detail {

// The config.json object hf_config_json() serialises; parse_hf_config() reads it back to an
// identical ModelConfig.
nlohmann::json hf_config_object(const ModelConfig& config);

// Hugging Face's torch_dtype spelling ("float32", "float16", "bfloat16") of a floating dtype.
const char* hf_torch_dtype(DType dtype);

}  // namespace spindle::engine::detail
