// The bases of `spindle-bench grpo` and what each runs: run shape, scheduler options, policies.

#include <stdlib.h>

#include <algorithm>
#include <string>
#include <system_error>

#include "bench.h"
#include "bench_grpo.h"
#include "spindle/core/error.h"
#include "spindle/engine/byte_tokenizer.h"
#include "spindle/engine/loader.h"

namespace spindle::bench::grpo {
namespace {

// Prompts of every policy. stories260K: TinyStories openings. qwen3-shape: short byte strings
// (its random weights know no language; only the row and token counts matter).
const std::vector<std::string> kStoryPrompts = {"Once upon a time", "One day", "There was a",
                                                "Lily saw", "Tom went", "The little girl"};
const std::vector<std::string> kShortPrompts = {"Q: 12+7=", "Q: 3*9=", "Q: 40-17=",
                                                "Q: 8+26=", "Q: 6*7=", "Q: 91-45="};
// Prompt tokens of `prompts` at most: one per byte, plus BOS and a leading space (stories260K's
// SentencePiece prefix); bounds the byte tokenizer and stories260K's, whose pieces are longer.
int64_t max_prompt_tokens(const std::vector<std::string>& prompts) {
  size_t bytes = 0;
  for (const std::string& p : prompts) bytes = std::max(bytes, p.size());
  return int64_t(bytes) + 2;
}

const std::vector<std::string>& base_prompts(BaseKind base) {
  return base == BaseKind::stories260k ? kStoryPrompts : kShortPrompts;
}

constexpr const char* kWords[] = {"cat", "dog", "ball", "tree", "sun", "bird", "girl", "boy",
                                  "cake", "park", "fish", "box", "car", "hat", "moon", "toy"};

// Qwen3-0.6B's shape with the byte tokenizer's vocabulary and special ids, `layers` layers.
engine::ModelConfig qwen3_shape_config(int64_t layers) {
  engine::ModelConfig c = qwen3_0_6b_config(layers);
  c.vocab_size = engine::kByteTokenizerVocabSize;
  c.bos_id = engine::kByteTokenizerBosId;
  c.eos_id = engine::kByteTokenizerEosId;
  c.max_seq_len = 512;
  c.name = "random Qwen3-0.6B shape, byte tokenizer";
  c.validate(c.name);
  return c;
}

// Every KV block a worker's largest run can hold at once: each sample job's prompt sequence
// plus its `group` forks, each of prompt + max_tokens tokens, one spare block each for
// copy-on-write of a shared partial block; the same in both modes.
int64_t kv_blocks_needed(const GrpoBenchOptions& o, int max_policies) {
  constexpr int64_t kBlock = 16;
  const int64_t prompt = max_prompt_tokens(base_prompts(o.base));
  const int64_t per_seq = (prompt + o.max_tokens + kBlock - 1) / kBlock + 1;
  const int64_t per_job = (int64_t(o.group) + 1) * per_seq;
  return int64_t(max_policies) * o.prompts * per_job;
}

}  // namespace

const char* base_kind_name(BaseKind kind) {
  return kind == BaseKind::stories260k ? "stories260k" : "qwen3-shape";
}

void apply_base_defaults(GrpoBenchOptions& o) {
  const auto set = [](auto& field, auto value) {
    if (field == 0) field = value;
  };
  set(o.threads, 1);  // bench_grpo.cpp's header says why
  if (o.base == BaseKind::stories260k) {
    if (o.quick) {
      set(o.steps, 2); set(o.group, 4); set(o.prompts, 2); set(o.max_tokens, 16);
      set(o.repeats, 1);
    }
    set(o.steps, 4); set(o.group, 8); set(o.prompts, 4); set(o.max_tokens, 48);
    set(o.repeats, 3);
  } else {
    // Few rows per policy (group 4 x 1 prompt): one policy's decode step is a GEMM of 4 rows
    // that streams every weight from memory; K concurrent policies stream them once for 4K rows
    // (the MinT regime). One repetition: the model is big enough that per-step noise averages
    // out over the run, and the whole bench fits in about 10 minutes on two cores.
    if (o.quick) {
      set(o.steps, 1); set(o.max_tokens, 8);
    }
    set(o.steps, 2); set(o.group, 4); set(o.prompts, 1); set(o.max_tokens, 32);
    set(o.repeats, 1);
  }
}

TempQwen3Base::TempQwen3Base(int64_t layers, uint64_t seed) {
  const auto t0 = Clock::now();
  std::string templ = (fs::temp_directory_path() / "spindle-bench-grpo-XXXXXX").string();
  SPINDLE_CHECK(::mkdtemp(templ.data()) != nullptr, io, "cannot create a temp directory {}",
                templ);
  root_ = templ;
  dir_ = root_ / "qwen3-shape";
  try {
    const engine::ModelWeights w = fast_random_weights(qwen3_shape_config(layers), seed);
    weight_bytes_ = double(w.bytes());
    engine::save_hf_dir(w, dir_);
    engine::write_byte_tokenizer(dir_, {.model_max_length = w.config.max_seq_len});
  } catch (...) {
    std::error_code ec;
    fs::remove_all(root_, ec);
    throw;
  }
  build_s_ = seconds_since(t0);
}

TempQwen3Base::~TempQwen3Base() {
  std::error_code ec;  // best effort: a leftover temp directory is no reason to fail the bench
  fs::remove_all(root_, ec);
}

rl::LocalEngineOptions engine_options(const GrpoBenchOptions& o, int max_policies) {
  // Training slots for the largest K of the bench (at least 8, LocalEngine's default).
  rl::LocalEngineOptions e{.device = o.device,
                           .training_slots = std::max(8, max_policies),
                           .max_rank = 32,
                           .token_budget = 2048,
                           .kv_blocks = 4096};
  if (o.base == BaseKind::qwen3_shape) {
    // A qwen3-shape KV block costs 256 KiB per layer: size the cache to what the largest run
    // holds (stories260K keeps LocalEngine's default, which costs it little).
    e.kv_blocks = kv_blocks_needed(o, max_policies);
  }
  // A trainer call holds at most one policy's step (group x prompts sequences of prompt +
  // max_tokens): a pass merging K policies runs as calls of that size, so its activations do
  // not grow with K (the peak-memory goal); a policy alone is one call, as before.
  const int64_t one_step = int64_t(o.group) * o.prompts *
                           (max_prompt_tokens(base_prompts(o.base)) + o.max_tokens);
  e.train_tokens_per_pass = std::min(e.token_budget, one_step);
  return e;
}

rl::PolicyConfig bench_policy(const GrpoBenchOptions& o, int k) {
  rl::PolicyConfig p;
  p.rank = o.rank;
  p.alpha = 2.0f * float(o.rank);
  p.loss = engine::LossFn::ppo;
  p.loss_config.clip_high_threshold = 1.28f;
  p.dataset.name = "inline";
  // Uniform-reward groups train too (zero advantage): the same passes every step, whatever
  // the rewards (dropping them would skip training in some steps and not others).
  p.drop_uniform_groups = false;
  if (o.base == BaseKind::stories260k) {
    const size_t n = std::size(kWords);
    const std::string word = kWords[size_t(k) % n];
    p.name = "likes-" + word + (k >= int(n) ? "-" + std::to_string(k) : "");
    p.learning_rate = 1e-2f;
    p.dataset.prompts = base_prompts(o.base);
    p.reward.terms.push_back({word, "keywords", 1.0, R"({"present": [")" + word + R"("]})"});
  } else {
    // Random bytes decode to a varying number of code points: a cheap reward that varies.
    const int target = std::max(1, o.max_tokens / 2) + k % 8;
    p.name = "length-" + std::to_string(target) + "-" + std::to_string(k);
    p.learning_rate = 1e-3f;
    p.dataset.prompts = base_prompts(o.base);
    p.reward.terms.push_back(
        {"length", "length", 1.0, R"({"unit": "chars", "target": )" + std::to_string(target) +
                                      R"(, "tolerance": 1})"});
  }
  return p;
}

std::string reward_description(const GrpoBenchOptions& o) {
  return o.base == BaseKind::stories260k
             ? "keywords reward (one word per policy)"
             : "length reward in code points (target max_tokens/2 + k mod 8 for policy k)";
}

}  // namespace spindle::bench::grpo
