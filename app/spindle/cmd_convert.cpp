// spindle convert: any model Spindle loads -> a Hugging Face directory (config.json,
// model.safetensors, and the model's tokenizer), so `spindle generate --model DIR` and
// transformers both load it. Prints one summary line to stderr; nothing on stdout.

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/tokenizer.h"

namespace spindle::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertArgs {
  std::string from;
  std::string to;
  std::string dtype = "f32";
};

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::f32;
  if (s == "f16") return DType::f16;
  if (s == "bf16") return DType::bf16;
  SPINDLE_THROW(invalid_argument, "--dtype {}: expected f32, f16 or bf16", s);
}

// The tokenizer beside/inside `model`, if any. Only "nothing found" is tolerated: the weights
// are still worth converting, and the summary says the tokenizer is missing.
std::optional<fs::path> find_tokenizer(const fs::path& model) {
  try {
    return engine::default_tokenizer_path(model);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
    return std::nullopt;
  }
}

// Copies the tokenizer to where default_tokenizer_path(dir) looks: tokenizer.json stays
// tokenizer.json; a llama2.c tokenizer (tok512.bin, tokenizer.bin) becomes tokenizer.bin.
fs::path copy_tokenizer(const fs::path& src, const fs::path& dir) {
  const fs::path dst =
      dir / (src.filename() == "tokenizer.json" ? "tokenizer.json" : "tokenizer.bin");
  std::error_code ec;
  if (fs::exists(dst, ec) && fs::equivalent(src, dst, ec)) return dst;  // converting in place
  write_file_atomic(dst, read_file_to_string(src, size_t(1) << 30));
  return dst;
}

void run_convert(const ConvertArgs& args) {
  const DType dtype = parse_dtype(args.dtype);
  const fs::path from(args.from);
  const fs::path to(args.to);
  const engine::ModelWeights weights = engine::load_model(from);
  const std::optional<fs::path> tokenizer = find_tokenizer(from);
  engine::save_hf_dir(weights, to, dtype);
  const std::string tok_note =
      tokenizer ? "tokenizer " + copy_tokenizer(*tokenizer, to).filename().string()
                : "no tokenizer found beside the model (pass --tokenizer to generate)";

  const auto& c = weights.config;
  const size_t params = weights.bytes() / sizeof(float);
  std::fprintf(stderr, "%s\n",
               fmt::format("spindle convert: {} -> {}: {} with {} layers, dim {}, vocab {}, {} "
                           "parameters as {} ({:.1f} MiB); {}",
                           from.string(), to.string(), engine::arch_name(c.arch), c.n_layers, c.dim,
                           c.vocab_size, params, dtype_name(dtype),
                           double(params * dtype_size(dtype)) / (1 << 20), tok_note)
                   .c_str());
}

}  // namespace

void register_convert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Convert a model (HF directory or llama2.c .bin) to an HF safetensors directory");
  cmd->add_option("--from", args->from, "HF directory or llama2.c .bin")->required();
  cmd->add_option("--to", args->to, "output directory (created if missing)")->required();
  cmd->add_option("--dtype", args->dtype, "tensor dtype on disk")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  cmd->callback([args] { run_convert(*args); });
}

}  // namespace spindle::cli
