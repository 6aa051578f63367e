// spindle tokenize: text -> ids (one JSON array on stdout) or ids -> text (raw bytes, no newline).

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/tokenizer.h"

namespace spindle::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer;  // a tokenizer file, or a model directory / file to find one for
  std::string text;
  std::string file;
  std::string decode;  // JSON array of ids
};

std::vector<int32_t> parse_ids(const std::string& arg) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(arg);
  } catch (const nlohmann::json::parse_error& e) {
    SPINDLE_THROW(invalid_argument, "--decode: not a JSON array of token ids (byte {}): {}", e.byte,
                  arg);
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number past double's range
    SPINDLE_THROW(invalid_argument, "--decode: not a JSON array of token ids ({}): {}", e.what(),
                  arg);
  }
  SPINDLE_CHECK(j.is_array(), invalid_argument, "--decode: expected a JSON array of ids, got {}",
                j.type_name());
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    SPINDLE_CHECK(j[i].is_number_integer() && j[i].get<int64_t>() >= INT32_MIN &&
                      j[i].get<int64_t>() <= INT32_MAX,
                  invalid_argument, "--decode: element {} ({}) is not a token id", i, j[i].dump());
    ids.push_back(static_cast<int32_t>(j[i].get<int64_t>()));
  }
  return ids;
}

void write_stdout(const std::string& bytes) {
  SPINDLE_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() &&
                    std::fflush(stdout) == 0,
                io, "tokenize: writing {} bytes to stdout failed", bytes.size());
}

void run_tokenize(const TokenizeArgs& args, bool has_text, bool has_file, bool has_decode) {
  SPINDLE_CHECK(int(has_text) + int(has_file) + int(has_decode) == 1, invalid_argument,
                "tokenize: give exactly one of --text, --file or --decode");
  // load_tokenizer resolves a model directory through default_tokenizer_path.
  const std::unique_ptr<engine::Tokenizer> tok = engine::load_tokenizer(args.tokenizer);

  if (has_decode) {
    write_stdout(tok->decode(parse_ids(args.decode)));
    return;
  }
  const std::string text = has_file ? read_file_to_string(args.file) : args.text;
  const std::vector<int32_t> ids =
      tok->encode(text, {.add_special_tokens = true, .parse_special = true});
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  write_stdout(out);
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Encode text to token ids (JSON array) or decode ids to text (raw bytes)");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json, a llama2.c tokenizer .bin, or a model directory")
      ->required();
  CLI::Option* text = cmd->add_option("--text", args->text, "text to encode");
  CLI::Option* file = cmd->add_option("--file", args->file, "file whose bytes to encode");
  CLI::Option* decode = cmd->add_option("--decode", args->decode, "JSON array of ids to decode");
  cmd->callback([args, text, file, decode] {
    run_tokenize(*args, text->count() > 0, file->count() > 0, decode->count() > 0);
  });
}

}  // namespace spindle::cli
