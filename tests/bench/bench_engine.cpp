// spindle-bench engine: decode and prefill speed of Model::forward, the cost of LoRA (one
// adapter and 64 distinct adapters in one batch), and batch-1 decode against the memory
// bandwidth bound, on stories260K and on a Qwen3-0.6B-shaped model with random weights.
//
// Decode = Model::forward with one new token per sequence and LogitsFor::last_token over a KvCache
// (no sampling). Runs that a ratio compares are timed interleaved (A, B, A, B, ...) so a change
// in machine load hits both alike; each reports the median over its timed repetitions.

#include <cstdio>
#include <cstdlib>

#include "bench.h"
#include "spindle/core/error.h"
#include "spindle/engine/generator.h"
#include "spindle/engine/loader.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/model.h"
#include "spindle/kernels/cpu_features.h"

namespace spindle::bench {
namespace {

using engine::BatchSequence;
using engine::ForwardState;
using engine::KvCache;
using engine::LoraSlotPool;
using engine::LoraTarget;
using engine::Model;
using engine::ModelConfig;
using engine::ModelWeights;

// The seven projections (MLA: its four and o_proj); gate/up/down adapt the routed experts
// (and shared experts) on a sparse layer.
constexpr LoraTarget kSevenTargets[] = {LoraTarget::q,    LoraTarget::k,  LoraTarget::v,
                                        LoraTarget::o,    LoraTarget::gate, LoraTarget::up,
                                        LoraTarget::down};
constexpr LoraTarget kMlaTargets[] = {LoraTarget::q_a,  LoraTarget::q_b, LoraTarget::kv_a,
                                      LoraTarget::kv_b, LoraTarget::o,   LoraTarget::gate,
                                      LoraTarget::up,   LoraTarget::down};
constexpr int64_t kRank = 8;
constexpr int32_t kSlots = 64;
constexpr int64_t kBlockSize = 16;

// Step counts per model. A timed repetition runs clamp(rep_seconds / step time, 2, max_steps)
// steps, the step time measured on the last warm-up step.
struct Plan {
  int64_t prompt = 16;      // prompt tokens of every batch-1 decode sequence
  int64_t b64_prompt = 16;  // prompt tokens of every batch-64 decode sequence
  int warmup = 4;       // untimed decode steps per run
  double b1_rep_seconds = 0.5;
  int b1_max_steps = 64, b1_reps = 5;
  double b64_rep_seconds = 1.0;
  int b64_max_steps = 32, b64_reps = 5;
  int64_t prefill_seqs = 8, prefill_len = 256;
  int prefill_reps = 5;
  bool prefill_warmup = true;  // one untimed prefill per run first
  int gen_tokens = 64;  // generator batch-1 new tokens
};

Plan qwen_plan(bool quick) {
  Plan p;
  p.prompt = 8;
  p.b64_prompt = 4;
  p.warmup = 2;
  p.b1_rep_seconds = quick ? 0.5 : 1.5;
  p.b1_max_steps = 16;
  p.b1_reps = quick ? 3 : 5;
  p.b64_rep_seconds = quick ? 1.0 : 3.0;
  p.b64_max_steps = 6;
  p.b64_reps = 3;
  p.prefill_seqs = 4;
  p.prefill_len = 128;  // 512 tokens
  p.prefill_reps = quick ? 2 : 3;
  p.prefill_warmup = quick;  // a full-size prefill is seconds long: warm-up noise is small
  p.gen_tokens = quick ? 4 : 8;
  return p;
}

// Deterministic pseudo-random token ids (the same work in every run; values do not matter).
int32_t token_at(uint64_t i, int64_t vocab) {
  i = (i ^ (i >> 31)) * 0x7fb5d329728ea185ull;
  return int32_t((i ^ (i >> 27)) % uint64_t(vocab));
}

KvCache make_cache(const ModelConfig& c, int64_t n_seqs, int64_t tokens_per_seq) {
  const int64_t blocks = n_seqs * ((tokens_per_seq + kBlockSize - 1) / kBlockSize);
  return KvCache(c, {.block_size = kBlockSize, .n_blocks = blocks, .max_seqs = n_seqs});
}

// A batch of sequences with their own KV cache, prefilled, then stepped one token at a time.
class DecodeRun {
 public:
  DecodeRun(const Model& model, const LoraSlotPool* pool, std::vector<int32_t> slots,
            int64_t prompt, int64_t max_new)
      : model_(model), pool_(pool),
        cache_(make_cache(model.config(), int64_t(slots.size()), prompt + max_new)),
        cur_(slots.size()) {
    const int64_t vocab = model.config().vocab_size;
    prompts_.resize(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      for (int64_t j = 0; j < prompt; ++j) prompts_[i].push_back(token_at(i * 1000 + j, vocab));
      batch_.push_back({cache_.create(), prompts_[i], slots[i]});
    }
  }

  // Prefills every prompt in one forward, then runs `warmup` steps; returns the last step's time.
  double warm(int warmup) {
    model_.forward(batch_, cache_, pool_, st_, {.logits = engine::LogitsFor::last_token});
    for (size_t i = 0; i < batch_.size(); ++i) batch_[i].tokens = {&cur_[i], 1};
    double last = 0;
    for (int s = 0; s < warmup; ++s) last = steps(1);
    return last;
  }

  // Seconds for n decode steps (one new token for every sequence per step).
  double steps(int n) {
    const int64_t vocab = model_.config().vocab_size;
    const Clock::time_point start = Clock::now();
    for (int s = 0; s < n; ++s) {
      for (size_t i = 0; i < cur_.size(); ++i) cur_[i] = token_at(step_ * 7919 + i, vocab);
      ++step_;
      model_.forward(batch_, cache_, pool_, st_, {.logits = engine::LogitsFor::last_token});
    }
    return seconds_since(start);
  }

  int64_t batch() const { return int64_t(batch_.size()); }
  double mean_context() const {
    double sum = 0;
    for (const auto& b : batch_) sum += double(cache_.length(b.seq));
    return sum / double(batch_.size());
  }

 private:
  const Model& model_;
  const LoraSlotPool* pool_;
  KvCache cache_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<int32_t> cur_;  // this step's token per sequence; batch_ spans point here
  std::vector<BatchSequence> batch_;
  ForwardState st_;
  uint64_t step_ = 0;
};

// Warms every run, picks the step count from the slowest warm step, then times `reps` rounds of
// `steps` steps per run, interleaved. Returns each run's median tokens/s; `steps_out` the count.
std::vector<double> interleaved_decode(const std::vector<DecodeRun*>& runs, const Plan& plan,
                                       double rep_seconds, int max_steps, int reps,
                                       int& steps_out) {
  double slowest = 1e-9;
  for (DecodeRun* r : runs) slowest = std::max(slowest, r->warm(plan.warmup));
  const int steps = std::clamp(int(rep_seconds / slowest), 2, max_steps);
  std::vector<std::vector<double>> tps(runs.size());
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t i = 0; i < runs.size(); ++i) {
      tps[i].push_back(double(runs[i]->batch() * steps) / runs[i]->steps(steps));
    }
  }
  steps_out = steps;
  std::vector<double> out;
  for (auto& v : tps) out.push_back(median(v));
  return out;
}

// Max decode tokens a run may append: warm-up plus every timed step at the cap.
int64_t decode_budget(const Plan& plan, int max_steps, int reps) {
  return plan.warmup + int64_t(max_steps) * reps;
}

// Prefill of n_seqs prompts of `len` tokens in one forward (fresh sequences every time).
class PrefillRun {
 public:
  PrefillRun(const Model& model, const LoraSlotPool* pool, int32_t slot, int64_t n_seqs,
             int64_t len)
      : model_(model), pool_(pool), slot_(slot), cache_(make_cache(model.config(), n_seqs, len)) {
    for (int64_t i = 0; i < n_seqs; ++i) {
      prompts_.emplace_back();
      for (int64_t j = 0; j < len; ++j)
        prompts_.back().push_back(token_at(uint64_t(i * 100003 + j), model.config().vocab_size));
    }
  }

  // Tokens/s of one prefill forward (cache bookkeeping outside the timed region).
  double run() {
    std::vector<BatchSequence> batch;
    for (const auto& p : prompts_) batch.push_back({cache_.create(), p, slot_});
    const Clock::time_point start = Clock::now();
    model_.forward(batch, cache_, pool_, st_, {.logits = engine::LogitsFor::last_token});
    const double s = seconds_since(start);
    for (const auto& b : batch) cache_.release(b.seq);
    return double(tokens()) / s;
  }
  int64_t tokens() const { return int64_t(prompts_.size() * prompts_.front().size()); }

 private:
  const Model& model_;
  const LoraSlotPool* pool_;
  int32_t slot_;
  KvCache cache_;
  std::vector<std::vector<int32_t>> prompts_;
  ForwardState st_;
};

void print_ratio(const char* name, double value) { std::printf("%s = %.2f\n", name, value); }

void bench_model(const std::string& name, const ModelWeights& weights, const Plan& plan,
                 const EngineBenchOptions& opts) {
  const ModelConfig& c = weights.config;
  const Model model(weights);
  std::printf("\n== %s ==\n", name.c_str());
  std::printf("%s: dim %lld, %lld layers, %lld/%lld heads of %lld, hidden %lld, vocab %lld, "
              "%.3f GB fp32 weights\n",
              engine::arch_name(c.arch), (long long)c.dim, (long long)c.n_layers,
              (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.head_dim,
              (long long)c.hidden_dim, (long long)c.vocab_size, double(weights.bytes()) / 1e9);

  // 64 slots of rank 8 over the seven projections, each holding its own random adapter.
  Clock::time_point start = Clock::now();
  const std::span<const LoraTarget> targets =
      c.mla_attention() ? std::span<const LoraTarget>(kMlaTargets) : kSevenTargets;
  LoraSlotPool pool(
      c, {.max_slots = kSlots, .max_rank = kRank, .targets = {targets.begin(), targets.end()}});
  std::vector<engine::LoraWeights> adapters(kSlots);
#pragma omp parallel for schedule(dynamic, 1)
  for (int32_t s = 0; s < kSlots; ++s) {
    adapters[size_t(s)] = engine::LoraWeights::random(c, kRank, /*alpha=*/16.0f, targets,
                                                      /*seed=*/1000 + uint64_t(s), 0.02f, 0.02f);
  }
  for (int32_t s = 0; s < kSlots; ++s) pool.load(s, adapters[size_t(s)]);
  adapters.clear();
  std::string names;
  for (LoraTarget t : targets)
    names += std::string(names.empty() ? "" : ",") + engine::lora_target_name(t);
  std::printf("adapter pool: %d slots, rank %lld, %s%s, %.3f GB (%.1f s to fill)\n", kSlots,
              (long long)kRank, names.c_str(),
              c.moe.n_experts > 0 ? " (+ every routed expert)" : "", double(pool.bytes()) / 1e9,
              seconds_since(start));

  // ---- batch-1 decode: base vs one adapter (the decode half of lora/base) ----
  double b1_base = 0, b1_lora = 0, b1_context = 0;
  {
    const int64_t budget = decode_budget(plan, plan.b1_max_steps, plan.b1_reps);
    DecodeRun base(model, &pool, {-1}, plan.prompt, budget);
    DecodeRun lora(model, &pool, {0}, plan.prompt, budget);
    int steps = 0;
    const auto tps = interleaved_decode({&base, &lora}, plan, plan.b1_rep_seconds,
                                        plan.b1_max_steps, plan.b1_reps, steps);
    b1_base = tps[0];
    b1_lora = tps[1];
    b1_context = base.mean_context() - 0.5 * steps * plan.b1_reps;  // mean over timed steps
    std::printf("decode batch 1, base:               %10.1f tok/s  (median of %d x %d steps)\n",
                b1_base, plan.b1_reps, steps);
    std::printf("decode batch 1, one rank-8 adapter: %10.1f tok/s  (lora/base %.3f)\n", b1_lora,
                b1_lora / b1_base);
  }

  // ---- batch-1 decode against the memory bandwidth bound ----
  const Bandwidth bw = measure_read_bandwidth(size_t(1) << 30, opts.threads, /*passes=*/5);
  const double bytes_per_token = decode_bytes_per_token(weights, b1_context);
  const double bound = bw.bytes_per_s / bytes_per_token;
  std::printf("read bandwidth: %.2f GB/s (%s loads, %d threads, %.2f GiB buffer, best of %d)\n",
              bw.bytes_per_s / 1e9, bw.isa.c_str(), bw.threads,
              double(bw.buffer_bytes) / double(1 << 30), bw.passes);
  std::printf("bytes read per decoded token: %.2f MB (weights + KV at context %.0f) -> bound "
              "%.1f tok/s\n", bytes_per_token / 1e6, b1_context, bound);
  if (bytes_per_token < 64e6) {
    std::printf("note: %.1f MB fits in the CPU caches; the DRAM bound does not apply here\n",
                bytes_per_token / 1e6);
  }
  print_ratio("decode/bandwidth_bound", b1_base / bound);

  // ---- batch-64 decode: one adapter for all rows vs 64 distinct adapters ----
  {
    const int64_t budget = decode_budget(plan, plan.b64_max_steps, plan.b64_reps);
    std::vector<int32_t> single(kSlots, 0), hetero(kSlots), none(kSlots, -1);
    for (int32_t s = 0; s < kSlots; ++s) hetero[size_t(s)] = s;
    DecodeRun run_single(model, &pool, single, plan.b64_prompt, budget);
    DecodeRun run_hetero(model, &pool, hetero, plan.b64_prompt, budget);
    DecodeRun run_base(model, &pool, none, plan.b64_prompt, budget);
    int steps = 0;
    const auto tps = interleaved_decode({&run_single, &run_hetero, &run_base}, plan,
                                        plan.b64_rep_seconds, plan.b64_max_steps, plan.b64_reps,
                                        steps);
    std::printf("decode batch 64, one rank-8 adapter:   %10.1f tok/s  (median of %d x %d steps)\n",
                tps[0], plan.b64_reps, steps);
    std::printf("decode batch 64, 64 rank-8 adapters:   %10.1f tok/s\n", tps[1]);
    std::printf("decode batch 64, base only (reference): %9.1f tok/s  (single/base %.3f)\n",
                tps[2], tps[0] / tps[2]);
    print_ratio("hetero/single", tps[1] / tps[0]);
  }

  // ---- prefill: base vs one adapter ----
  double pf_base = 0, pf_lora = 0;
  {
    PrefillRun base(model, &pool, -1, plan.prefill_seqs, plan.prefill_len);
    PrefillRun lora(model, &pool, 0, plan.prefill_seqs, plan.prefill_len);
    if (plan.prefill_warmup) {  // first touch of activation buffers
      base.run();
      lora.run();
    }
    std::vector<double> b, l;
    for (int rep = 0; rep < plan.prefill_reps; ++rep) {
      b.push_back(base.run());
      l.push_back(lora.run());
    }
    pf_base = median(b);
    pf_lora = median(l);
    std::printf("prefill %lld x %lld tokens, base:               %10.1f tok/s  (median of %d)\n",
                (long long)plan.prefill_seqs, (long long)plan.prefill_len, pf_base,
                plan.prefill_reps);
    std::printf("prefill %lld x %lld tokens, one rank-8 adapter: %10.1f tok/s  (lora/base %.3f)\n",
                (long long)plan.prefill_seqs, (long long)plan.prefill_len, pf_lora,
                pf_lora / pf_base);
  }
  std::printf("lora/base: prefill %.3f, decode %.3f\n", pf_lora / pf_base, b1_lora / b1_base);
  print_ratio("lora/base", std::min(pf_lora / pf_base, b1_lora / b1_base));

  // ---- Generator end to end (greedy, includes prefill and sampling) ----
  {
    KvCache cache = make_cache(c, 1, plan.prompt + plan.gen_tokens);
    engine::Generator gen(model, cache, nullptr, nullptr);
    engine::GenerationRequest req;
    for (int64_t j = 0; j < plan.prompt; ++j) req.prompt.push_back(token_at(uint64_t(j), c.vocab_size));
    req.params.max_tokens = plan.gen_tokens;
    req.params.temperature = 0.0f;
    start = Clock::now();
    const auto out = gen.generate({req});
    const double s = seconds_since(start);
    std::printf("generator batch 1, greedy: %.1f tok/s (%zu new tokens after a %lld-token prompt, "
                "prefill and sampling included)\n",
                double(out[0][0].tokens.size()) / s, out[0][0].tokens.size(),
                (long long)plan.prompt);
  }
}

// The KV cache per token, measured from allocated caches (KvCache::bytes over its capacity),
// for the MLA model against the GQA cache of Qwen3-30B-A3B and the multi-head cache the same
// MLA heads would need uncompressed.
void print_kv_bytes(const ModelConfig& mla) {
  auto measured = [](const ModelConfig& c) {
    const KvCache cache(c, {.block_size = kBlockSize, .n_blocks = 64, .max_seqs = 1});
    return double(cache.bytes()) / double(64 * kBlockSize) / double(c.n_layers);
  };
  ModelConfig mha = mla;  // the same heads, K and V cached per head (qk 192, v padded alike)
  mha.arch = engine::Arch::qwen3;
  mha.mla = {};
  mha.moe = {};
  mha.rope_scaling.reset();
  const ModelConfig gqa = qwen3_30b_a3b_config(mla.n_layers);
  const double m = measured(mla), h = measured(mha), g = measured(gqa);
  std::printf(
      "kv cache per token and layer (fp32, measured): MLA latent %.0f B (%lld + %lld "
      "floats), Qwen3-30B-A3B GQA %.0f B (2 x %lld heads x %lld), uncompressed MHA of "
      "these heads %.0f B\n",
      m, (long long)mla.mla.kv_lora_rank, (long long)mla.mla.qk_rope_head_dim, g,
      (long long)gqa.n_kv_heads, (long long)gqa.head_dim, h);
  print_ratio("kv_bytes/gqa", m / g);
  print_ratio("kv_bytes/mha", m / h);
}

// --arch: an MoE shape cut to a few layers (random weights), the same measurements as the
// dense shapes: decode batch 1 vs the active-parameter bandwidth bound, batch 64 with 64
// distinct adapters (rows grouped by (expert, slot)) vs one.
void run_moe_engine_bench(const EngineBenchOptions& opts) {
  SPINDLE_CHECK(opts.arch == "qwen3_moe" || opts.arch == "deepseek_v3", invalid_argument,
                "spindle-bench engine --arch: '{}' is not one of qwen3_moe, deepseek_v3",
                opts.arch);
  const int64_t layers = 2;  // memory: 64 slots of expert LoRA are ~2.2 GB per sparse layer
  const ModelConfig c =
      opts.arch == "qwen3_moe" ? qwen3_30b_a3b_config(layers) : deepseek_v3_moe_config(layers);
  const Clock::time_point start = Clock::now();
  const ModelWeights w = fast_random_weights(c, /*seed=*/42);
  std::printf("\n(generated %.2f GB of random weights in %.1f s)", double(w.bytes()) / 1e9,
              seconds_since(start));
  std::printf("\nrouted experts: %lld of %lld per token (%lld wide)%s\n", (long long)c.moe.top_k,
              (long long)c.moe.n_experts, (long long)c.moe.expert_dim,
              c.mla_attention() ? ", MLA (absorbed over the latent cache)" : "");
  if (c.mla_attention()) print_kv_bytes(c);
  Plan plan = qwen_plan(opts.quick);
  bench_model(
      fmt::format("{}, {} of {} layers", c.name, layers, opts.arch == "qwen3_moe" ? 48 : 61), w,
      plan, opts);
}

}  // namespace

void run_engine_bench(const EngineBenchOptions& opts) {
  std::printf("spindle-bench engine%s: %d threads (OpenBLAS and OpenMP), kernels use %s\n",
              opts.quick ? " --quick" : "", opts.threads,
              kernels::simd_level_name(kernels::simd_level()));
  // Thread wait policies change the results (spinning OpenMP workers compete with OpenBLAS's
  // threads for the cores); say which were in force.
  for (const char* var : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_NUM_THREADS"}) {
    if (const char* v = std::getenv(var)) std::printf("  %s=%s\n", var, v);
  }

  if (!opts.arch.empty()) {
    run_moe_engine_bench(opts);
    return;
  }
  // (a) stories260K, or the model given with --model.
  const std::filesystem::path path =
      opts.model.empty() ? opts.shared_dir / "models/stories260K/stories260K.bin" : opts.model;
  if (std::filesystem::exists(path)) {
    const ModelWeights w = engine::load_model(path);
    bench_model(path.filename().string(), w, Plan{}, opts);
  } else {
    std::printf("\n== %s ==\nskipped: %s not found (pass --shared DIR, set SPINDLE_SHARED_DIR, or "
                "--model PATH)\n", path.filename().string().c_str(), path.string().c_str());
  }

  // (b) Qwen3-0.6B shape, random weights.
  const int64_t layers = opts.quick ? 4 : 28;
  const Clock::time_point start = Clock::now();
  const ModelWeights w = fast_random_weights(qwen3_0_6b_config(layers), /*seed=*/42);
  const double fill_s = seconds_since(start);
  const std::string name = opts.quick ? "Qwen3-0.6B shape, random weights, QUICK: 4 of 28 layers"
                                      : "Qwen3-0.6B shape, random weights";
  std::printf("\n(generated %.2f GB of random weights in %.1f s)", double(w.bytes()) / 1e9, fill_s);
  bench_model(name, w, qwen_plan(opts.quick), opts);
}

}  // namespace spindle::bench
