// spindle-bench residency: adapter residency tiers, as ratios measured in one run.
//   1. packed vs per-expert load of a Qwen3-30B-A3B-shaped MoE adapter (128 experts, 48
//      layers, hidden 2048, moe_intermediate 768, rank 8) from disk to host, page cache
//      dropped before each timing (posix_fadvise DONTNEED): packed_speedup = per/packed.
//   1b. the same adapter shape LIVE: a Qwen3-30B-A3B-shaped LoRA (rank 8 on q, k, v, o and
//      every expert's gate/up/down) read from disk, decoded and loaded into a slot of the
//      engine's slot pool on `--device` (cpu, or cuda: the device slot, waited for), as a
//      packed revision blob vs a per-expert PEFT directory (one tensor per expert and
//      projection, what PEFT writes): packed_live_speedup (DEVICE) = per/packed.
//   2. host-cache hit vs cold load latency through the loader (p50/p99).
//   3. warm-request throughput (acquire -> LoRA shrink of every layer -> release) while
//      `--storm` cold loads are in flight vs none: warm_during_storm = storm/none.

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "spindle/adapters/host_cache.h"
#include "spindle/adapters/loader.h"
#include "spindle/adapters/moe_packed.h"
#include "spindle/adapters/peft.h"
#include "spindle/adapters/residency.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/lora.h"
#include "spindle/execution/select.h"
#include "spindle/kernels/lora.h"

namespace spindle::bench {
namespace {

namespace fs = std::filesystem;
using adapters::AdapterPtr;

struct ResidencyBenchOptions {
  int64_t layers = 48;
  int64_t experts = 128;  // Qwen3-30B-A3B: 48 x 128 x 3 = 18 432 expert modules
  int64_t rank = 8;
  int repeats = 3;
  int storm = 100;
  int loader_threads = 2;
  int loader_nice = 10;  // LoaderOptions::thread_nice
  double warm_seconds = 1.0;  // baseline window for warm throughput
  bool quick = false;
  std::string device = "cpu";  // the live MoE load's slot pool: cpu | cuda[:N]
  bool live_only = false;      // only part 1b
  std::string dir;
};

// Drops the file's pages from the page cache (clean pages: the files were fsynced on write).
void drop_cache(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void run_moe(const ResidencyBenchOptions& o, const fs::path& dir) {
  const adapters::MoeDims dims{o.layers, o.experts, /*hidden=*/2048, /*moe_intermediate=*/768};
  const fs::path packed_path = dir / "moe_packed.safetensors";
  const fs::path experts_path = dir / "moe_per_expert.safetensors";
  size_t bytes = 0;
  {
    const auto adapter = adapters::PackedMoeLora::random(dims, o.rank, 16.0f, 1, 0.02f, 0.02f);
    bytes = adapter.bytes();
    adapters::save_packed_moe(adapter, packed_path);
    adapters::save_per_expert_moe(adapter, experts_path);
  }
  std::printf("moe adapter: %lld layers x %lld experts, rank %lld, %.1f MiB; per-expert file "
              "holds %lld tensors, packed %lld\n",
              (long long)o.layers, (long long)o.experts, (long long)o.rank,
              double(bytes) / (1 << 20), (long long)(o.layers * o.experts * 6),
              (long long)(o.layers * 6));
  std::vector<double> packed_s, per_s;
  for (int i = 0; i < o.repeats; ++i) {  // alternate, so drift hits both equally
    drop_cache(packed_path);
    auto t0 = Clock::now();
    { const auto a = adapters::load_packed_moe(packed_path, dims); }
    packed_s.push_back(seconds_since(t0));
    drop_cache(experts_path);
    t0 = Clock::now();
    { const auto a = adapters::load_per_expert_moe(experts_path, dims); }
    per_s.push_back(seconds_since(t0));
  }
  const double p = median(packed_s), e = median(per_s);
  std::printf("cold load to host: packed %.3f s (%.0f MiB/s), per-expert %.3f s (%.0f MiB/s)\n",
              p, double(bytes) / (1 << 20) / p, e, double(bytes) / (1 << 20) / e);
  std::printf("packed_speedup = %.2f\n", e / p);
  fs::remove(packed_path);
  fs::remove(experts_path);
}

void run_moe_live(const ResidencyBenchOptions& o, const fs::path& dir) {
  engine::ModelConfig c;
  c.arch = engine::Arch::qwen3_moe;
  c.dim = 2048;
  c.hidden_dim = 6144;
  c.n_layers = o.layers;
  c.n_heads = 32;
  c.n_kv_heads = 4;
  c.head_dim = 128;
  c.vocab_size = 151936;
  c.max_seq_len = 4096;
  c.tie_embeddings = false;
  c.moe = {.n_experts = o.experts,
           .top_k = std::min<int64_t>(8, o.experts),
           .expert_dim = 768,
           .sparse_step = 1,
           .dense_layers = {},
           .norm_topk = true,
           .aux_loss_coef = 0.001f};
  c.name = "qwen3-30b-a3b-shape";
  c.validate("bench");
  using engine::LoraTarget;
  const LoraTarget targets[] = {LoraTarget::q,    LoraTarget::k,  LoraTarget::v,   LoraTarget::o,
                                LoraTarget::gate, LoraTarget::up, LoraTarget::down};
  const fs::path blob = dir / "moe_live.revision";
  const fs::path peft = dir / "moe_live_peft";
  size_t bytes = 0;
  {
    const auto w = engine::LoraWeights::random(c, o.rank, 16.0f, targets, 3, 0.02f, 0.02f);
    bytes = adapters::lora_weights_bytes(w);
    write_file_atomic(blob, adapters::encode_revision(
                                w, adapters::revision_meta_for(
                                       w, {.base_model_id = c.name, .base_checksum = "bench"})));
    adapters::save_peft(w, peft, {.base_model_name_or_path = c.name});
  }
  const auto pool_ptr =
      execution::open_slot_pool(c, {.max_slots = 1, .max_rank = int32_t(o.rank)}, o.device);
  engine::SlotPool& pool = *pool_ptr;
  const std::string device = pool.device().name();
  std::printf(
      "moe live load: %lld layers x %lld experts, rank %lld on q,k,v,o + experts, %.1f "
      "MiB; slot pool %.1f MiB\n",
      (long long)o.layers, (long long)o.experts, (long long)o.rank, double(bytes) / (1 << 20),
      double(pool.bytes()) / (1 << 20));
  std::vector<double> packed_s, per_s;
  for (int i = 0; i < o.repeats; ++i) {  // alternate, so drift hits both equally
    drop_cache(blob);
    auto t0 = Clock::now();
    {
      // As the daemon's loader reads a blob (BlobStore::get_revision, less the digest): each
      // tensor straight into its memory.
      const auto d = adapters::read_revision_file(FileReader(blob), "blob");
      pool.load(0, d.weights);
      pool.synchronize();  // servable: on a GPU, landed in the device slot
    }
    packed_s.push_back(seconds_since(t0));
    pool.clear(0);
    pool.synchronize();
    drop_cache(peft / "adapter_model.safetensors");
    t0 = Clock::now();
    pool.load(0, adapters::load_peft(peft, c));
    pool.synchronize();
    per_s.push_back(seconds_since(t0));
    pool.clear(0);
    pool.synchronize();
  }
  const double p = median(packed_s), e = median(per_s);
  std::printf("cold load into a %s engine slot: packed blob %.3f s, per-expert PEFT %.3f s\n",
              device.c_str(), p, e);
  std::printf("packed_live_speedup (%s) = %.2f\n", device.c_str(), e / p);
  fs::remove(blob);
  fs::remove_all(peft);
}

// Dense Qwen3-0.6B-shaped revisions (rank 8 on q and v) saved as PEFT directories.
struct RevisionSet {
  engine::ModelConfig config;
  fs::path dir;
  int count = 0;
  fs::path path(const std::string& id) const { return dir / id; }
  std::string id(int i) const { return "rev-" + std::to_string(i); }
};

RevisionSet make_revisions(const ResidencyBenchOptions& o, const fs::path& dir, int count) {
  RevisionSet set{qwen3_0_6b_config(o.quick ? 4 : 28), dir / "revisions", count};
  const engine::LoraTarget targets[] = {engine::LoraTarget::q, engine::LoraTarget::v};
  for (int i = 0; i < count; ++i) {
    const auto w = engine::LoraWeights::random(set.config, 8, 16.0f, targets, uint64_t(i) + 7,
                                               0.02f, 0.02f);
    adapters::save_peft(w, set.path(set.id(i)));
  }
  return set;
}

void run_latency(const ResidencyBenchOptions& o, const RevisionSet& revs) {
  adapters::HostCache cache(size_t(4) << 30);
  adapters::Loader loader(
      cache,
      [&](const std::string& id) {
        return std::make_shared<const engine::LoraWeights>(
            adapters::load_peft(revs.path(id), revs.config));
      },
      {o.loader_threads, o.loader_nice});
  std::vector<double> cold_us, hit_us;
  const int n = std::min(revs.count, 40);
  for (int i = 0; i < n; ++i) {
    drop_cache(revs.path(revs.id(i)) / "adapter_model.safetensors");
    auto t0 = Clock::now();
    loader.request(revs.id(i)).get();
    cold_us.push_back(seconds_since(t0) * 1e6);
  }
  for (int rep = 0; rep < 50; ++rep) {
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      loader.request(revs.id(i)).get();
      hit_us.push_back(seconds_since(t0) * 1e6);
    }
  }
  std::printf("adapter: %.1f MiB per revision\n",
              double(cache.stats().bytes) / n / (1 << 20));
  std::printf("cold load (disk -> host): p50 %.0f us, p99 %.0f us\n", percentile(cold_us, 0.5),
              percentile(cold_us, 0.99));
  std::printf("host-cache hit:           p50 %.2f us, p99 %.2f us\n", percentile(hit_us, 0.5),
              percentile(hit_us, 0.99));
  std::printf("cold/hit p50 = %.0f\n", percentile(cold_us, 0.5) / percentile(hit_us, 0.5));
}

// One warm request: acquire the slot, run the LoRA shrink of 4 tokens through every layer's q
// projection, release. Returns false if the slot was not resident (never expected here).
bool warm_request(adapters::ResidencyManager& mgr, const engine::LoraSlotPool& pool,
                  const std::string& id, std::vector<float>& x, std::vector<float>& h) {
  const auto slot = mgr.acquire(id);
  if (!slot) return false;
  const kernels::LoraSegment seg{0, 4, *slot};
  for (int64_t l = 0; l < pool.config().n_layers; ++l) {
    const auto view = pool.view(l, engine::LoraTarget::q);
    kernels::lora_shrink(x.data(), view->d_in, *view, {&seg, 1}, h.data());
  }
  mgr.release(*slot);
  return true;
}

void run_storm(const ResidencyBenchOptions& o, const RevisionSet& revs) {
  const int n_warm = 4;
  engine::LoraSlotPool pool(revs.config,
                            {/*max_slots=*/8, /*max_rank=*/8,
                             {engine::LoraTarget::q, engine::LoraTarget::v}});
  adapters::HostCache cache(size_t(4) << 30);
  adapters::Loader loader(
      cache,
      [&](const std::string& id) {
        return std::make_shared<const engine::LoraWeights>(
            adapters::load_peft(revs.path(id), revs.config));
      },
      {o.loader_threads, o.loader_nice});
  adapters::ResidencyManager mgr(pool, cache, loader);
  std::vector<std::string> warm;
  for (int i = 0; i < n_warm; ++i) {
    warm.push_back(revs.id(i));
    loader.request(warm.back()).get();
    if (auto s = mgr.acquire(warm.back())) mgr.release(*s);
  }
  std::vector<float> x(size_t(4 * revs.config.dim), 0.5f), h(size_t(4 * 8));
  // Baseline: no loads in flight.
  uint64_t done = 0;
  auto t0 = Clock::now();
  while (seconds_since(t0) < o.warm_seconds) done += warm_request(mgr, pool, warm[done % n_warm], x, h);
  const double base_rate = double(done) / seconds_since(t0);
  // Storm: park `storm` cold revisions (loads start), keep serving warm work until all land.
  for (int i = n_warm; i < n_warm + o.storm; ++i)
    drop_cache(revs.path(revs.id(i)) / "adapter_model.safetensors");
  done = 0;
  int landed = 0;
  t0 = Clock::now();
  for (int i = n_warm; i < n_warm + o.storm; ++i) mgr.acquire(revs.id(i), /*priority=*/0);
  const size_t peak_depth = loader.stats().queue_depth;
  while (landed < o.storm) {
    done += warm_request(mgr, pool, warm[done % n_warm], x, h);
    if (done % 64 == 0) landed += int(mgr.take_landed().size());
  }
  const double storm_s = seconds_since(t0);
  const double storm_rate = double(done) / storm_s;
  const auto ls = loader.stats();
  std::printf("storm: %d cold loads landed in %.2f s (queue depth at start %zu, mean wait %.1f "
              "ms, max %.1f ms, %d loader threads at nice +%d)\n",
              o.storm, storm_s, peak_depth, ls.mean_wait_ms(), ls.wait_ms_max, o.loader_threads,
              o.loader_nice);
  std::printf("warm requests/s: none in flight %.0f, during storm %.0f\n", base_rate, storm_rate);
  std::printf("warm_during_storm = %.2f\n", storm_rate / base_rate);
}

void run_residency_bench(const ResidencyBenchOptions& o_in) {
  ResidencyBenchOptions o = o_in;
  if (o.quick) o.layers = std::min<int64_t>(o.layers, 4), o.storm = std::min(o.storm, 20);
  const fs::path dir = o.dir.empty() ? fs::temp_directory_path() /
                                           ("spindle_bench_residency_" + std::to_string(::getpid()))
                                     : fs::path(o.dir);
  fs::create_directories(dir);
  if (o.live_only) {
    run_moe_live(o, dir);
    if (o.dir.empty()) fs::remove_all(dir);
    return;
  }
  run_moe(o, dir);
  run_moe_live(o, dir);
  const RevisionSet revs = make_revisions(o, dir, 4 + o.storm);
  run_latency(o, revs);
  run_storm(o, revs);
  if (o.dir.empty()) fs::remove_all(dir);
}

}  // namespace

void register_residency_bench(CLI::App& app) {
  auto o = std::make_shared<ResidencyBenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "residency", "packed vs per-expert MoE adapter load; cache hit vs cold; warm work in a storm");
  cmd->add_option("--layers", o->layers, "MoE layers")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--experts", o->experts, "experts per layer")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--rank", o->rank, "LoRA rank")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "timed cold loads per layout")->check(CLI::Range(1, 100))->capture_default_str();
  cmd->add_option("--storm", o->storm, "cold loads in flight")->check(CLI::Range(1, 10000))->capture_default_str();
  cmd->add_option("--loader-threads", o->loader_threads, "loader threads")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--loader-nice", o->loader_nice, "nice increment of loader threads")->check(CLI::Range(0, 19))->capture_default_str();
  cmd->add_option("--dir", o->dir, "scratch directory (default: fresh, under /tmp)");
  cmd->add_option("--device", o->device, "slot pool of the live MoE load: cpu | cuda[:N]")
      ->capture_default_str();
  cmd->add_flag("--live-only", o->live_only, "only the live MoE load (packed_live_speedup)");
  cmd->add_flag("--quick", o->quick, "smoke run: 4 MoE layers, 4-layer dense revisions, storm 20");
  cmd->callback([o] { run_residency_bench(*o); });
}

}  // namespace spindle::bench
