// spindle generate: one prompt through the resident engine, completion text on stdout.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "spindle/adapters/peft.h"
#include "spindle/core/error.h"
#include "spindle/engine/generator.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/tokenizer.h"

namespace spindle::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string tokenizer;
  std::string adapter;
  std::string prompt;
  int32_t max_tokens = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
};

void run_generate(const GenerateArgs& args) {
  using namespace spindle::engine;
  const ModelWeights weights = load_model(args.model);
  const auto tok_path = args.tokenizer.empty() ? default_tokenizer_path(args.model)
                                               : std::filesystem::path(args.tokenizer);
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tok_path);
  SPINDLE_CHECK(tokenizer->vocab_size() <= weights.config.vocab_size, invalid_argument,
                "tokenizer {} has {} tokens but the model's vocab is {} (hint: wrong tokenizer?)",
                tok_path.string(), tokenizer->vocab_size(), weights.config.vocab_size);

  std::vector<int32_t> prompt = tokenizer->encode(args.prompt);
  if (prompt.empty()) prompt.push_back(tokenizer->bos_id().value_or(weights.config.bos_id));

  std::optional<LoraSlotPool> pool;
  int32_t slot = -1;
  if (!args.adapter.empty()) {
    const LoraWeights adapter = adapters::load_peft(args.adapter, weights.config);
    LoraPoolOptions opts;
    opts.max_slots = 1;
    opts.max_rank = int32_t(adapter.rank);
    opts.targets = adapters::adapted_targets(adapter);
    pool.emplace(weights.config, opts);
    pool->load(0, adapter);
    slot = 0;
  }

  const Model model(weights);
  KvCache cache(weights.config, {.block_size = 16, .n_blocks = 0, .max_seqs = 1});
  Generator generator(model, cache, pool ? &*pool : nullptr, tokenizer.get());

  GenerationRequest req;
  req.prompt = prompt;
  req.slot = slot;
  req.params.max_tokens = args.max_tokens;
  req.params.temperature = args.temperature;
  req.params.top_p = args.top_p;
  req.params.top_k = args.top_k;
  req.params.seed = args.seed;
  req.params.stop_strings = args.stop;
  // A model emitting EOS ends; so does one emitting BOS (a new document starts), as llama2.c.
  for (auto id : {tokenizer->eos_id(), tokenizer->bos_id()}) {
    if (id) req.params.stop_token_ids.push_back(*id);
  }
  const auto results = generator.generate({req});
  const Completion& out = results.at(0).at(0);
  std::fwrite(out.text.data(), 1, out.text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion for one prompt");
  cmd->add_option("--model", args->model, "HF directory or llama2.c .bin")->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json or llama2.c tokenizer (default: found beside the model)");
  cmd->add_option("--adapter", args->adapter, "PEFT LoRA adapter directory");
  cmd->add_option("--prompt", args->prompt, "prompt text (empty: start from BOS)")->required();
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "nucleus sampling mass in (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "keep the k most likely tokens (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed (same seed, same tokens)")
      ->capture_default_str();
  cmd->add_option("--stop", args->stop, "stop string (repeatable)");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace spindle::cli
