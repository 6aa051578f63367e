// spindle sft: supervised LoRA fine-tuning of one adapter over a resident base, cross-entropy
// on the weighted tokens of a JSONL dataset (see spindle/engine/train_data.h for the rows).
// Writes a PEFT directory plus optimizer_state.safetensors beside it, so `--init OUT` resumes
// exactly. Stdout: one line per step, "step <i>/<n> loss <mean per weighted token> tokens <n>".

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "spindle/adapters/optimizer_state.h"
#include "spindle/adapters/peft.h"
#include "spindle/core/error.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/sampler.h"
#include "spindle/engine/tokenizer.h"
#include "spindle/engine/train_data.h"
#include "spindle/engine/trainer.h"

namespace spindle::cli {
namespace {

using namespace spindle::engine;

struct SftArgs {
  std::string model, tokenizer, data, init, out;
  int64_t rank = 0;
  float alpha = 0.0f;
  std::string targets = "q,k,v,o,gate,up,down";
  int64_t steps = 0;
  int64_t batch = 4;
  uint64_t seed = 0;
  AdamParams adam;
  // Whether the user set these (an --init adapter's own values win; a clash is an error).
  const CLI::Option* rank_opt = nullptr;
  const CLI::Option* alpha_opt = nullptr;
  const CLI::Option* targets_opt = nullptr;
};

std::vector<LoraTarget> parse_targets(const std::string& list) {
  std::vector<LoraTarget> out;
  std::stringstream ss(list);
  for (std::string name; std::getline(ss, name, ',');) {
    if (name.empty()) continue;
    const auto t = lora_target_from_name(name);
    SPINDLE_CHECK(t.has_value(), invalid_argument,
                  "--targets: unknown module '{}' (expected q, k, v, o, gate, up, down, lm_head)",
                  name);
    if (std::find(out.begin(), out.end(), *t) == out.end()) out.push_back(*t);
  }
  SPINDLE_CHECK(!out.empty(), invalid_argument, "--targets: no module given");
  return out;
}

std::string targets_str(const LoraWeights& w) {
  std::string s;
  for (LoraTarget t : adapters::adapted_targets(w)) s += (s.empty() ? "" : ",") + std::string(lora_target_name(t));
  return s;
}

// The adapter to train and its optimizer state: fresh (init_lora) or resumed from --init.
std::pair<LoraWeights, AdamW> initial_adapter(const SftArgs& args, const ModelConfig& config) {
  if (args.init.empty()) {
    SPINDLE_CHECK(args.rank_opt->count() > 0, invalid_argument,
                  "--rank is required (unless --init names an adapter to continue)");
    const float alpha = args.alpha_opt->count() > 0 ? args.alpha : float(args.rank);
    const auto targets = parse_targets(args.targets);
    return {init_lora(config, args.rank, alpha, targets, args.seed), AdamW{}};
  }
  LoraWeights w = adapters::load_peft(args.init, config);
  SPINDLE_CHECK(args.rank_opt->count() == 0 || args.rank == w.rank, invalid_argument,
                "--rank {} disagrees with the rank {} of the --init adapter {}", args.rank, w.rank,
                args.init);
  SPINDLE_CHECK(args.alpha_opt->count() == 0 || args.alpha == w.alpha, invalid_argument,
                "--alpha {} disagrees with lora_alpha {} of the --init adapter {}", args.alpha,
                w.alpha, args.init);
  if (args.targets_opt->count() > 0) {
    auto want = parse_targets(args.targets);
    auto have = adapters::adapted_targets(w);
    std::sort(want.begin(), want.end());
    SPINDLE_CHECK(want == have, invalid_argument,
                  "--targets {} disagree with the modules {} of the --init adapter {}",
                  args.targets, targets_str(w), args.init);
  }
  AdamW adam = adapters::has_optimizer_state(args.init) ? adapters::load_optimizer_state(args.init)
                                                        : AdamW{};
  return {std::move(w), std::move(adam)};
}

// Rows of each step: a seeded permutation of the data, cycled and reshuffled every epoch.
class BatchCycler {
 public:
  BatchCycler(size_t n_rows, uint64_t seed) : order_(n_rows), rng_(seed) { shuffle(); }
  std::vector<size_t> next(int64_t batch) {
    std::vector<size_t> rows;
    for (int64_t i = 0; i < batch; ++i) {
      if (pos_ == order_.size()) shuffle();
      rows.push_back(order_[pos_++]);
    }
    return rows;
  }

 private:
  void shuffle() {
    std::iota(order_.begin(), order_.end(), size_t(0));
    for (size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[rng_.next() % (i + 1)]);
    pos_ = 0;
  }
  std::vector<size_t> order_;
  Rng rng_;
  size_t pos_ = 0;
};

void run_sft(const SftArgs& args) {
  args.adam.validate();
  SPINDLE_CHECK(args.steps >= 1, invalid_argument, "--steps must be >= 1, got {}", args.steps);
  SPINDLE_CHECK(args.batch >= 1, invalid_argument, "--batch must be >= 1, got {}", args.batch);
  const ModelWeights weights = load_model(args.model);
  const ModelConfig& config = weights.config;
  const auto tok_path = args.tokenizer.empty() ? default_tokenizer_path(args.model)
                                               : std::filesystem::path(args.tokenizer);
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tok_path);
  SPINDLE_CHECK(tokenizer->vocab_size() <= config.vocab_size, invalid_argument,
                "tokenizer {} has {} tokens but the model's vocab is {} (hint: wrong tokenizer?)",
                tok_path.string(), tokenizer->vocab_size(), config.vocab_size);

  std::vector<TrainDatum> data = load_sft_jsonl(
      args.data, *tokenizer, {.max_len = config.max_seq_len, .vocab_size = config.vocab_size});
  for (TrainDatum& d : data) d.slot = 0;

  auto [adapter, adam] = initial_adapter(args, config);
  const std::string targets = targets_str(adapter);
  LoraPoolOptions pool_opts;
  pool_opts.max_slots = 1;
  pool_opts.max_rank = int32_t(adapter.rank);
  pool_opts.targets = adapters::adapted_targets(adapter);
  LoraSlotPool pool(config, pool_opts);
  const Model model(weights);
  LoraTrainer trainer(model, pool);
  const int64_t resumed_from = adam.step_count();
  trainer.attach(0, std::move(adapter), std::move(adam));

  BatchCycler cycler(data.size(), sample_seed(args.seed, /*index=*/1));
  std::vector<TrainDatum> batch;
  for (int64_t step = 1; step <= args.steps; ++step) {
    batch.clear();
    for (size_t r : cycler.next(args.batch)) batch.push_back(data[r]);
    const auto out = trainer.forward_backward(batch, LossFn::cross_entropy);
    trainer.optim_step(0, args.adam);
    const auto& m = out.metrics;
    std::printf("step %lld/%lld loss %.4f tokens %lld\n", (long long)step, (long long)args.steps,
                m.n_tokens ? m.loss / double(m.n_tokens) : 0.0, (long long)m.n_tokens);
    std::fflush(stdout);
  }

  adapters::save_peft(trainer.weights(0), args.out,
                      {.base_model_name_or_path = args.model, .base = &config});
  adapters::save_optimizer_state(trainer.optimizer(0), args.out);
  const LoraWeights& w = trainer.weights(0);
  std::fprintf(stderr, "%s\n",
               fmt::format("spindle sft: {} rows, {} steps of {} (optimizer step {} -> {}); "
                           "rank {}, alpha {}, targets {}; wrote {}",
                           data.size(), args.steps, args.batch, resumed_from,
                           trainer.optimizer(0).step_count(), w.rank, w.alpha, targets, args.out)
                   .c_str());
}

}  // namespace

void register_sft(CLI::App& app) {
  auto args = std::make_shared<SftArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sft", "Supervised LoRA fine-tuning on a JSONL dataset; writes a PEFT adapter directory");
  cmd->add_option("--model", args->model, "HF directory or llama2.c .bin")->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json or llama2.c tokenizer (default: found beside the model)");
  cmd->add_option("--data", args->data,
                  "JSONL: {\"prompt\", \"completion\"} or {\"input_tokens\", \"target_tokens\", "
                  "\"weights\"} per line")
      ->required();
  args->rank_opt = cmd->add_option("--rank", args->rank, "LoRA rank (required without --init)")
                       ->check(CLI::Range(1, 128));
  args->alpha_opt = cmd->add_option("--alpha", args->alpha, "lora_alpha (default: rank, scale 1)");
  args->targets_opt =
      cmd->add_option("--targets", args->targets,
                      "comma-separated modules: q,k,v,o,gate,up,down,lm_head")
          ->capture_default_str();
  cmd->add_option("--init", args->init,
                  "continue this PEFT adapter (its rank, alpha, targets and optimizer state)");
  cmd->add_option("--steps", args->steps, "optimizer steps")->required();
  cmd->add_option("--lr", args->adam.learning_rate, "AdamW learning rate")->required();
  cmd->add_option("--batch", args->batch, "rows per step (seeded shuffle, cycled)")
      ->capture_default_str();
  cmd->add_option("--beta1", args->adam.beta1)->capture_default_str();
  cmd->add_option("--beta2", args->adam.beta2)->capture_default_str();
  cmd->add_option("--adam-eps", args->adam.eps)->capture_default_str();
  cmd->add_option("--weight-decay", args->adam.weight_decay)->capture_default_str();
  cmd->add_option("--grad-clip", args->adam.grad_clip_norm, "global grad-norm clip (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "LoRA init and data order")->capture_default_str();
  cmd->add_option("--out", args->out, "output PEFT directory (created if missing)")->required();
  cmd->callback([args] { run_sft(*args); });
}

}  // namespace spindle::cli
