// spindle-bench catalog --policies N: bulk-register N policies with one revision each, then
// time the catalog's client paths from random starting points:
//   lookup    get by address (spindle://bench/<name>@latest: policy + head revision)
//   page      a 100-row keyset page (name order) continuing from a cursor
//   lineage   ancestors of a revision 50 commits deep
//   search    full-text search for one word
// Prints p50/p99 per path, `lookup_p99_ms = X` and `page_p99_ms = X` lines, and a ratio
// measured in the same run. Goal at 10^7 policies: lookup p99 < 1 ms, page p99 < 5 ms.

#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "spindle/adapters/revision_format.h"
#include "spindle/catalog/catalog.h"
#include "spindle/core/error.h"

namespace spindle::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct CatalogBenchOptions {
  int64_t policies = 10000;
  int samples = 2000;
  int batch = 10000;
  int64_t cache_mib = 256;
  std::string dir;  // default: a fresh folder under /tmp, removed afterwards
  bool keep = false;
  bool reuse = false;  // measure a --dir an earlier run built with the same --policies
};

constexpr const char* kTenant = "bench";
constexpr int kVocabulary = 10000;  // description words "w0000".."w9999"

uint64_t mix(uint64_t x) {  // splitmix64: names in random order, reproducible
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string policy_name(int64_t i) {
  return fmt::format("pol-{:016x}", mix(uint64_t(i)));
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Percentiles {
  double p50 = 0, p99 = 0;
};

Percentiles percentiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size())))]; };
  return {at(0.50), at(0.99)};
}

uint64_t dir_bytes(const fs::path& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

catalog::LoraSpec bench_spec() {
  return {.rank = 8,
          .alpha = 16.0f,
          .targets = {engine::LoraTarget::q, engine::LoraTarget::v},
          .use_rslora = false};
}

engine::LoraWeights bench_adapter() {
  engine::ModelConfig c;
  c.arch = engine::Arch::llama;
  c.dim = 64;
  c.hidden_dim = 128;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = 16;
  c.vocab_size = 128;
  c.max_seq_len = 64;
  const engine::LoraTarget t[] = {engine::LoraTarget::q, engine::LoraTarget::v};
  return engine::LoraWeights::random(c, 8, 16.0f, t, 1, 0.1f, 0.1f);
}

void run_catalog_bench(const CatalogBenchOptions& o) {
  const fs::path dir = o.dir.empty() ? fs::temp_directory_path() /
                                           fmt::format("spindle-bench-catalog-{}", ::getpid())
                                     : fs::path(o.dir);
  const bool reuse = o.reuse && fs::exists(dir / "catalog.db");
  SPINDLE_CHECK(reuse || !fs::exists(dir / "catalog.db"), invalid_argument,
                "{} already holds a catalog; give an empty --dir (or --reuse it)", dir.string());
  std::mt19937_64 rng(7);
  double bulk_rows_per_s = 0;
  if (!reuse) {
    catalog::CatalogOptions copt;
    copt.cache_mib = o.cache_mib;
    catalog::Catalog cat(dir, copt);
    cat.register_base({.id = "base-a", .arch = "llama", .path = "", .checksum = "a"}, "bench");
    cat.register_base({.id = "base-b", .arch = "llama", .path = "", .checksum = "b"}, "bench");
    const auto weights = bench_adapter();
    std::string blob[2];
    for (int b = 0; b < 2; ++b) {
      blob[b] = cat.blobs().put(adapters::encode_revision(
          weights, adapters::revision_meta_for(weights, {.base_model_id = b ? "base-b" : "base-a",
                                                         .base_checksum = b ? "b" : "a"})));
    }

    // ---- bulk registration --------------------------------------------------------------
    const auto t0 = Clock::now();
    std::vector<catalog::BulkEntry> batch;
    for (int64_t i = 0; i < o.policies;) {
      batch.clear();
      for (; i < o.policies && int64_t(batch.size()) < o.batch; ++i) {
        catalog::BulkEntry e;
        const bool b = i % 4 == 3;
        e.spec.name = policy_name(i);
        e.spec.base_id = b ? "base-b" : "base-a";
        e.spec.lora = bench_spec();
        e.spec.description =
            fmt::format("run w{:04} w{:04} w{:04}", mix(3 * i) % kVocabulary,
                        mix(3 * i + 1) % kVocabulary, mix(3 * i + 2) % kVocabulary);
        if (i % 10 == 0) e.spec.tags = {fmt::format("team-{}", i % 100)};
        e.blob_id = blob[b];
        batch.push_back(std::move(e));
      }
      cat.bulk_register(kTenant, batch, "bench");
      if (o.policies >= 2'000'000 && i % 1'000'000 < int64_t(batch.size())) {
        std::printf("  ... %lld registered, %.0f policies/s so far\n", (long long)i,
                    double(i) / (ms_since(t0) / 1000));
      }
    }
    const double bulk_s = ms_since(t0) / 1000;
    bulk_rows_per_s = double(o.policies) / bulk_s;
    std::printf(
        "catalog: %lld policies (+1 revision each) in %.1f s: %.0f policies/s; "
        "db + blobs %.1f MiB\n",
        (long long)o.policies, bulk_s, double(o.policies) / bulk_s,
        double(dir_bytes(dir)) / (1 << 20));

    // ---- a lineage 50 deep --------------------------------------------------------------
    catalog::PolicySpec chain;
    chain.name = "chain";
    chain.base_id = "base-a";
    chain.lora = bench_spec();
    cat.create_policy(kTenant, chain, "bench");
    catalog::CommitOptions commit;
    commit.actor = "bench";
    for (int s = 0; s <= 50; ++s) cat.commit_revision(kTenant, "chain", weights, commit);
  }

  // Measure on a fresh connection (its own cold SQLite cache; the OS page cache is warm).
  catalog::CatalogOptions copt;
  copt.cache_mib = o.cache_mib;
  catalog::Catalog cat(dir, copt);
  std::uniform_int_distribution<int64_t> pick(0, o.policies - 1);
  std::vector<double> lookup, page, lineage, search;
  for (int s = 0; s < o.samples; ++s) {
    const catalog::Address a{kTenant, policy_name(pick(rng)), ""};
    const auto t = Clock::now();
    const catalog::Resolved r = cat.get(kTenant, a);
    lookup.push_back(ms_since(t));
    SPINDLE_ASSERT(r.revision.step == 0);
  }
  for (int s = 0; s < std::max(1, o.samples / 4); ++s) {
    // A cursor at a random place: the first row of a random 6-hex-digit name prefix.
    catalog::ListQuery q;
    q.name_prefix = fmt::format("pol-{:06x}", rng() & 0xffffff);
    q.limit = 1;
    const std::string cursor = cat.list(kTenant, q).next_cursor;
    catalog::ListQuery next;
    next.limit = 100;
    next.cursor = cursor;
    const auto t = Clock::now();
    const catalog::PolicyPage p = cat.list(kTenant, next);
    page.push_back(ms_since(t));
    SPINDLE_ASSERT(!p.items.empty() || cursor.empty());
  }
  const catalog::Address head{kTenant, "chain", ""};
  for (int s = 0; s < std::max(1, o.samples / 10); ++s) {
    const auto t = Clock::now();
    const catalog::Lineage l = cat.lineage(kTenant, head);
    lineage.push_back(ms_since(t));
    SPINDLE_ASSERT(l.ancestors.size() == 50);
  }
  size_t hits = 0;
  for (int s = 0; s < std::max(1, o.samples / 10); ++s) {
    const std::string word = fmt::format("w{:04}", rng() % kVocabulary);
    const auto t = Clock::now();
    hits += cat.search(kTenant, word, 20).size();
    search.push_back(ms_since(t));
  }
  const Percentiles pl = percentiles(lookup), pp = percentiles(page), pg = percentiles(lineage),
                    ps = percentiles(search);
  std::printf("get by address    p50 %.3f ms  p99 %.3f ms  (%zu samples)\n", pl.p50, pl.p99,
              lookup.size());
  std::printf("page of 100       p50 %.3f ms  p99 %.3f ms  (%zu samples)\n", pp.p50, pp.p99,
              page.size());
  std::printf("lineage depth 50  p50 %.3f ms  p99 %.3f ms  (%zu samples)\n", pg.p50, pg.p99,
              lineage.size());
  std::printf("search one word   p50 %.3f ms  p99 %.3f ms  (%zu samples, %.1f hits each)\n", ps.p50,
              ps.p99, search.size(), double(hits) / double(search.size()));
  std::printf("bulk_policies_per_s = %.0f\n", bulk_rows_per_s);
  std::printf("lookup_p99_ms = %.3f\n", pl.p99);
  std::printf("page_p99_ms = %.3f\n", pp.p99);
  std::printf("page_p99/lookup_p99 = %.2f\n", pp.p99 / pl.p99);
  if (!o.keep && o.dir.empty()) fs::remove_all(dir);
}

}  // namespace

void register_catalog_bench(CLI::App& app) {
  auto o = std::make_shared<CatalogBenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "catalog", "policy catalog: bulk register rows/s; lookup, page, lineage, search p50/p99");
  cmd->add_option("--policies", o->policies, "policies to register (one revision each)")
      ->check(CLI::Range(int64_t(1), int64_t(100'000'000)))
      ->capture_default_str();
  cmd->add_option("--samples", o->samples, "timed lookups (pages: /4, lineage and search: /10)")
      ->check(CLI::Range(10, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "policies per bulk transaction")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--cache-mib", o->cache_mib, "SQLite page cache per connection")
      ->capture_default_str();
  cmd->add_option("--dir", o->dir, "data directory to build in (default: fresh, under /tmp)");
  cmd->add_flag("--keep", o->keep, "keep the default data directory afterwards");
  cmd->add_flag("--reuse", o->reuse, "measure an existing --dir built by an earlier run");
  cmd->callback([o] { run_catalog_bench(*o); });
}

}  // namespace spindle::bench
