#include "spindle/engine/tokenizer.h"

#include <algorithm>
#include <cctype>

#include "spindle/core/error.h"
#include "tokenizer_bpe.h"
#include "tokenizer_llama2c.h"

namespace spindle::engine {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& path) {
  std::error_code ec;
  SPINDLE_CHECK(fs::exists(path, ec), not_found, "tokenizer '{}' does not exist", path.string());
  if (fs::is_directory(path, ec)) return load_tokenizer(default_tokenizer_path(path));
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".json") return std::make_unique<BpeTokenizer>(parse_tokenizer_json(path));
  return Llama2cTokenizer::load(path);
}

std::unique_ptr<Tokenizer> tokenizer_from_json(const std::string& text, const std::string& source) {
  return std::make_unique<BpeTokenizer>(parse_tokenizer_json_text(text, source));
}

fs::path default_tokenizer_path(const fs::path& model_path) {
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) {
    for (const char* name : {"tokenizer.json", "tokenizer.bin"}) {
      if (fs::is_regular_file(model_path / name, ec)) return model_path / name;
    }
    SPINDLE_THROW(not_found, "no tokenizer for model directory '{}': looked for tokenizer.json and "
                  "tokenizer.bin inside it",
                  model_path.string());
  }
  const fs::path dir = model_path.has_parent_path() ? model_path.parent_path() : fs::path(".");
  if (fs::is_regular_file(dir / "tokenizer.bin", ec)) return dir / "tokenizer.bin";
  std::vector<fs::path> candidates;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("tok") && name.ends_with(".bin") && it->is_regular_file(ec)) {
      candidates.push_back(it->path());
    }
  }
  SPINDLE_CHECK(!candidates.empty(), not_found,
                "no tokenizer for model '{}': looked for tokenizer.bin and tok*.bin in '{}'",
                model_path.string(), dir.string());
  return *std::min_element(candidates.begin(), candidates.end());
}

}  // namespace spindle::engine
