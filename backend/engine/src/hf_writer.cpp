// save_hf_dir: writes config.json and model.safetensors (one shard) for any loaded model, so
// a llama2.c checkpoint converts to a directory that Spindle and transformers both load.

#include <filesystem>

#include "loader_hf_config.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/safetensors.h"

namespace spindle::engine {

void save_hf_dir(const ModelWeights& weights, const std::filesystem::path& dir, DType dtype) {
  namespace fs = std::filesystem;
  const char* torch_dtype = detail::hf_torch_dtype(dtype);  // throws for non-floating dtypes
  weights.validate(weights.config.name.empty() ? dir.string() : weights.config.name);

  std::error_code ec;
  fs::create_directories(dir, ec);
  SPINDLE_CHECK(!ec && fs::is_directory(dir, ec), io, "{}: cannot create directory: {}",
                dir.string(), ec ? ec.message() : "a file of that name exists");

  std::vector<SafetensorsTensorIn> tensors;
  for_each_hf_tensor(weights, [&](const std::string& name, const Tensor& t) {
    tensors.push_back({name, dtype, t.shape(), t.data()});
  });
  // Weights first, config last: a directory with a config.json is complete.
  write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});

  nlohmann::json config = detail::hf_config_object(weights.config);
  config["torch_dtype"] = torch_dtype;
  write_file_atomic(dir / "config.json",
                    config.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace spindle::engine
