// load_model: dispatches on what the path is (an HF directory or a llama2.c file).

#include <filesystem>

#include "spindle/core/error.h"
#include "spindle/engine/loader.h"

namespace spindle::engine {

ModelWeights load_model(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return load_hf_dir(path);
  if (fs::is_regular_file(st)) {
    const std::string name = path.filename().string();
    SPINDLE_CHECK(path.extension() != ".safetensors" &&
                      !name.ends_with(".safetensors.index.json") && name != "config.json",
                  invalid_argument,
                  "{}: a Hugging Face model loads from its directory; pass {} instead",
                  path.string(), path.parent_path().empty() ? "." : path.parent_path().string());
    return load_llama2c(path);
  }
  SPINDLE_CHECK(!fs::exists(st), invalid_argument,
                "{}: neither a model directory nor a regular file", path.string());
  SPINDLE_THROW(not_found, "{}: no such model (expected an HF directory or a llama2.c .bin file)",
                path.string());
}

}  // namespace spindle::engine
