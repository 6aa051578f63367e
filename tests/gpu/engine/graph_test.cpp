// CUDA-graph decode (DeviceForwardOptions::use_graph, backend/engine_cuda/src/graph.h): replayed
// decode steps give logits bitwise equal to eager forwards of the same batches (same kernels), over
// contexts crossing the graph context buckets, a sequence released and another created mid-way
// (another graph shape), and an adapter evicted and reloaded into its slot between replays;
// DeviceGenerator's greedy tokens are identical with graphs on and off.

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "gpu_fixtures.h"
#include "spindle/engine/lora.h"
#include "spindle/engine_cuda/device_generator.h"
#include "spindle/engine_cuda/device_model.h"

namespace spindle::engine_cuda {
namespace {

using engine::Arch;
using engine::BatchSequence;
using engine::kAllLoraTargets;
using engine::LoraTarget;
using engine::LoraWeights;

engine::ModelConfig graph_config() {
  engine::ModelConfig c = testing::gpu_tiny_config(Arch::qwen3);
  c.max_seq_len = 128;  // decode contexts cross the 16, 32 and 64 buckets
  return c;
}

// Bitwise equality of two [rows, cols] logits tensors; names the first differing element.
::testing::AssertionResult bitwise_equal(const Tensor& got, const Tensor& want,
                                         const std::string& what) {
  if (got.numel() != want.numel() || got.rank() != 2 || want.rank() != 2 ||
      got.dim(0) != want.dim(0)) {
    return ::testing::AssertionFailure()
           << what << ": shapes differ (" << got.numel() << " vs " << want.numel() << " elements)";
  }
  const int64_t cols = want.dim(1);
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (std::memcmp(got.data() + i, want.data() + i, sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << what << ": row " << i / cols << " col " << i % cols << ": graph " << got.data()[i]
             << ", eager " << want.data()[i] << " (tolerance: bitwise)";
    }
  }
  return ::testing::AssertionSuccess();
}

int32_t argmax_row(const Tensor& logits, int64_t row) {
  const int64_t v = logits.dim(1);
  const float* r = logits.data() + row * v;
  int64_t best = 0;
  for (int64_t j = 1; j < v; ++j) {
    if (r[j] > r[best]) best = j;
  }
  return int32_t(best);
}

// Two caches and states driven in lockstep through one model: `eager` with use_graph off, `graph`
// with it on. Every step's logits must agree bitwise.
void check_graph_decode(Precision p, const engine::ModelConfig& config = graph_config()) {
  const engine::ModelWeights w = testing::random_weights(config, 77);
  const engine::ModelConfig& c = w.config;
  std::vector<LoraWeights> adapters;
  for (int i = 0; i < 4; ++i) {
    adapters.push_back(
        LoraWeights::random(c, 2 + 3 * i, 8.0f, kAllLoraTargets, 900 + i, 0.2f, 0.2f));
  }
  DeviceLoraPool pool(c, {.max_slots = 3, .max_rank = 16});
  for (int s = 0; s < 3; ++s) pool.load(s, adapters[size_t(s)]);
  const DeviceWeights dw(w, p);
  DeviceModel model(dw);
  const engine::KvCacheOptions ko{.block_size = 4, .n_blocks = 0, .max_seqs = 8};
  DeviceKvCache cache_e(c, ko, p), cache_g(c, ko, p);
  DeviceForwardState st_e, st_g;
  const DeviceForwardOptions eager{.logits = engine::LogitsFor::last_token};
  DeviceForwardOptions graph = eager;
  graph.use_graph = true;

  struct Seq {
    SeqId e = -1, g = -1;
    int32_t slot = -1;
    int32_t next = 0;
  };
  std::mt19937 rng(5);
  auto prompt = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(rng() % uint32_t(c.vocab_size));
    return t;
  };
  // Prefill (eager on both sides: not a pure decode batch) and take the first token.
  auto start = [&](std::vector<Seq>& seqs, const std::vector<size_t>& lens,
                   const std::vector<int32_t>& slots) {
    std::vector<BatchSequence> be, bg;
    std::vector<std::vector<int32_t>> prompts;
    const size_t first = seqs.size();
    for (size_t i = 0; i < lens.size(); ++i) {
      prompts.push_back(prompt(lens[i]));
      seqs.push_back({cache_e.create(), cache_g.create(), slots[i], 0});
    }
    for (size_t i = 0; i < lens.size(); ++i) {
      be.push_back({seqs[first + i].e, prompts[i], slots[i]});
      bg.push_back({seqs[first + i].g, prompts[i], slots[i]});
    }
    model.forward(be, cache_e, &pool, st_e, eager);
    model.forward(bg, cache_g, &pool, st_g, graph);
    ASSERT_TRUE(bitwise_equal(st_g.host_logits, st_e.host_logits, "prefill"));
    for (size_t i = 0; i < lens.size(); ++i) {
      seqs[first + i].next = argmax_row(st_e.host_logits, int64_t(i));
    }
  };

  std::vector<Seq> seqs;
  start(seqs, {3, 7, 12, 14, 9}, {-1, 0, 1, 2, 0});  // 3 adapters + base, slot 0 twice
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  for (int step = 0; step < 48; ++step) {
    if (step == 14) {  // release one sequence: 4 rows from now on (another graph)
      cache_e.release(seqs[1].e);
      cache_g.release(seqs[1].g);
      seqs.erase(seqs.begin() + 1);
    }
    if (step == 24) {  // a new sequence joins: 5 rows again
      start(seqs, {5}, {1});
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
    }
    if (step == 32) {  // slot 2 evicted and reloaded with another adapter, same addresses
      pool.clear(2);
      pool.load(2, adapters[3]);
    }
    std::vector<BatchSequence> be, bg;
    std::vector<int32_t> tokens(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      tokens[i] = seqs[i].next;
      be.push_back({seqs[i].e, {&tokens[i], 1}, seqs[i].slot});
      bg.push_back({seqs[i].g, {&tokens[i], 1}, seqs[i].slot});
    }
    model.forward(be, cache_e, &pool, st_e, eager);
    model.forward(bg, cache_g, &pool, st_g, graph);
    ASSERT_TRUE(bitwise_equal(st_g.host_logits, st_e.host_logits,
                              "decode step " + std::to_string(step) + " (" +
                                  std::to_string(seqs.size()) + " sequences, context " +
                                  std::to_string(cache_g.length(seqs[0].g)) + ")"));
    for (size_t i = 0; i < seqs.size(); ++i)
      seqs[i].next = argmax_row(st_e.host_logits, int64_t(i));
  }
  // Replays happened: shapes 5 and 4 rows over several buckets are cached.
  EXPECT_GE(model.cached_graphs(), 4u);
}

TEST(GpuGraph, DecodeReplayEqualsEagerBitwiseFp32) {
  SPINDLE_REQUIRE_GPU();
  check_graph_decode(Precision::fp32);
}

TEST(GpuGraph, DecodeReplayEqualsEagerBitwiseBf16) {
  SPINDLE_REQUIRE_GPU();
  check_graph_decode(Precision::bf16);
}

// Latent attention's decode (absorbed form over the latent cache, kv_b's LoRA absorbed, per-head
// GEMMs) captured and replayed: a DeepSeek-V3-shaped base with a dense MLP (routed experts are
// never captured, so the MoE fixture would not reach the graph).
TEST(GpuGraph, MlaDecodeReplayEqualsEagerBitwiseFp32) {
  SPINDLE_REQUIRE_GPU();
  engine::ModelConfig c = testing::gpu_tiny_config(Arch::deepseek_v3);
  c.moe = {};
  c.max_seq_len = 128;
  check_graph_decode(Precision::fp32, c);
}

// Greedy generation with forks and adapters: the same tokens and logprobs with graphs on/off.
TEST(GpuGraph, GeneratorGreedyTokensEqualWithAndWithoutGraphs) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w = testing::random_weights(graph_config(), 41);
  const engine::ModelConfig& c = w.config;
  DeviceLoraPool pool(c, {.max_slots = 2, .max_rank = 8});
  pool.load(0, LoraWeights::random(c, 8, 16, kAllLoraTargets, 3, 0.3f, 0.3f));
  pool.load(1, LoraWeights::random(c, 4, 8, kAllLoraTargets, 4, 0.3f, 0.3f));
  std::vector<engine::GenerationRequest> reqs(3);
  reqs[0].prompt = {1, 5, 6};
  reqs[0].slot = 1;
  reqs[0].num_samples = 3;
  reqs[0].params.max_tokens = 40;
  reqs[1].prompt = {1, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  reqs[1].params.max_tokens = 25;
  reqs[2].prompt = {1, 40};
  reqs[2].slot = 0;
  reqs[2].num_samples = 2;
  reqs[2].params.max_tokens = 50;
  for (auto& r : reqs) r.params.temperature = 0;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    const DeviceWeights dw(w, p);
    std::vector<std::vector<engine::Completion>> out[2];
    for (int use = 0; use < 2; ++use) {
      DeviceModel model(dw);
      DeviceKvCache cache(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 8}, p);
      DeviceGenerator gen(model, cache, &pool, nullptr, {}, {.use_graph = use == 1});
      out[use] = gen.generate(reqs);
      EXPECT_EQ(cache.live_sequences(), 0);
      if (use == 1) EXPECT_GT(model.cached_graphs(), 0u);
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      for (size_t n = 0; n < out[0][i].size(); ++n) {
        const std::string who = std::string(precision_name(p)) + " request " + std::to_string(i) +
                                " sample " + std::to_string(n);
        EXPECT_EQ(out[1][i][n].tokens, out[0][i][n].tokens) << who;
        EXPECT_EQ(out[1][i][n].logprobs, out[0][i][n].logprobs) << who << " (bitwise)";
      }
    }
  }
}

// Two bases on two engine threads, as spindled runs them: one thread's reallocations (here a
// second model's prefills of growing length) neither fail nor invalidate the other thread's
// decode graphs, whose steps still equal eager ones bitwise.
TEST(GpuGraph, AnotherThreadsReallocationsLeaveThisThreadsGraphs) {
  SPINDLE_REQUIRE_GPU();
  const engine::ModelWeights w = testing::random_weights(graph_config(), 52);
  const engine::ModelConfig& c = w.config;
  const DeviceWeights dw(w, Precision::fp32);
  DeviceModel model(dw);
  const engine::KvCacheOptions ko{.block_size = 4, .n_blocks = 0, .max_seqs = 2};
  DeviceKvCache cache_e(c, ko, Precision::fp32), cache_g(c, ko, Precision::fp32);
  DeviceForwardState st_e, st_g;
  const DeviceForwardOptions eager{.logits = engine::LogitsFor::last_token};
  DeviceForwardOptions graph = eager;
  graph.use_graph = true;
  const std::vector<int32_t> prompt = {1, 7, 3, 9};
  const SeqId se = cache_e.create(), sg = cache_g.create();
  model.forward(std::vector<BatchSequence>{{se, prompt, -1}}, cache_e, nullptr, st_e, eager);
  model.forward(std::vector<BatchSequence>{{sg, prompt, -1}}, cache_g, nullptr, st_g, graph);
  int32_t next = argmax_row(st_e.host_logits, 0);

  std::atomic<bool> stop{false}, ready{false};
  std::string other_error;
  std::thread other([&] {
    try {
      // Everything that waits on the legacy stream is made before this thread's loop starts;
      // the loop only allocates (fresh states) and runs forwards on its own model's stream.
      const DeviceWeights dw2(testing::random_weights(graph_config(), 53), Precision::fp32);
      DeviceModel model2(dw2);
      DeviceKvCache cache2(c, {.block_size = 4, .n_blocks = 0, .max_seqs = 1}, Precision::fp32);
      ready = true;
      for (int64_t n = 2; !stop.load() && n < c.max_seq_len; n += 3) {
        DeviceForwardState st2;  // fresh buffers every time: reallocations on this thread
        const SeqId seq = cache2.create();
        std::vector<int32_t> tokens(size_t(n), 5);
        model2.forward(std::vector<BatchSequence>{{seq, tokens, -1}}, cache2, nullptr, st2,
                       eager);
        cache2.release(seq);
      }
    } catch (const std::exception& e) {
      other_error = e.what();
    }
    ready = true;
  });
  while (!ready.load()) std::this_thread::yield();
  {
    struct Joiner {  // the other thread ends before this scope does, however it is left
      std::atomic<bool>& stop;
      std::thread& t;
      ~Joiner() {
        stop = true;
        t.join();
      }
    } joiner{stop, other};
    for (int step = 0; step < 24; ++step) {
      const std::vector<int32_t> tok = {next};
      model.forward(std::vector<BatchSequence>{{se, tok, -1}}, cache_e, nullptr, st_e, eager);
      model.forward(std::vector<BatchSequence>{{sg, tok, -1}}, cache_g, nullptr, st_g, graph);
      ASSERT_TRUE(
          bitwise_equal(st_g.host_logits, st_e.host_logits, "decode step " + std::to_string(step)));
      next = argmax_row(st_e.host_logits, 0);
    }
  }
  EXPECT_EQ(other_error, "");
  // Contexts 5..28 cross the 16 and 32 buckets: one graph each, plus a recapture for any growth
  // of this thread's own buffers (the eager state's); a process-wide generation made the other
  // thread's fresh states invalidate nearly every step (~24 entries).
  EXPECT_LE(model.cached_graphs(), 8u);
}

}  // namespace
}  // namespace spindle::engine_cuda
