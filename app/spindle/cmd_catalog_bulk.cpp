// spindle catalog bulk-register FROM --count N [--prefix P] [--batch B] (see cmd_catalog.cpp).
// Registers N policies P-000000 .. P-<N-1> in one catalog transaction per batch (the catalog's
// bulk_register), each with one revision that shares FROM's head revision file (same base,
// LoRA spec, blob, step and metrics; no blob is copied). For filling a catalog quickly: tests of
// large catalogs (the Studio's catalog view pages through 10^4 of them) and demos.
//
// Local data directories only, and only while no spindled has that directory open: the daemon
// caches catalog state, so stop it first (spindled holds an flock on the data dir while it runs).

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "spindle/catalog/catalog.h"
#include "spindle/core/error.h"

namespace spindle::cli::catalog_cli {

using Run = std::function<void(catalog::Catalog&, const std::string& tenant, bool json)>;

// Defined in cmd_catalog.cpp.
void run_with_catalog(const Run& fn);
std::string actor();

namespace {

struct BulkArgs {
  std::string from, prefix = "bulk";
  int64_t count = 0;
  int batch = 10000;
};

}  // namespace

void register_catalog_bulk(CLI::App& cmd) {
  auto a = std::make_shared<BulkArgs>();
  CLI::App* bulk = cmd.add_subcommand(
      "bulk-register", "Register many policies sharing one revision file (local data dir only)");
  bulk->add_option("FROM", a->from, "policy address whose head revision each new policy gets")
      ->required();
  bulk->add_option("--count", a->count, "policies to register")
      ->required()
      ->check(CLI::PositiveNumber);
  bulk->add_option("--prefix", a->prefix, "names are <prefix>-000000, <prefix>-000001, ...")
      ->capture_default_str();
  bulk->add_option("--batch", a->batch, "policies per transaction")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bulk->callback([a] {
    run_with_catalog([&](catalog::Catalog& cat, const std::string& tenant, bool as_json) {
      const catalog::Address from = catalog::parse_address_or_name(a->from, tenant);
      SPINDLE_CHECK(from.tenant == tenant, not_found, "policy {} not found", from.policy_str());
      const catalog::Resolved src = cat.get(tenant, from);
      std::vector<catalog::BulkEntry> batch;
      int64_t done = 0;
      for (int64_t i = 0; i < a->count;) {
        batch.clear();
        for (; i < a->count && int64_t(batch.size()) < a->batch; ++i) {
          catalog::BulkEntry e;
          e.spec.name = fmt::format("{}-{:06}", a->prefix, i);
          e.spec.base_id = src.policy.base_id;
          e.spec.lora = src.policy.lora;
          e.spec.description = fmt::format("bulk copy {} of {}", i, src.policy.name);
          e.blob_id = src.revision.blob;
          e.step = src.revision.step;
          e.metrics_json = src.revision.metrics_json;
          batch.push_back(std::move(e));
        }
        done += int64_t(cat.bulk_register(tenant, batch, actor()));
      }
      if (as_json) {
        std::printf("{\"registered\": %lld}\n", (long long)done);
      } else {
        std::printf("registered %lld policies (%s-%06d ..)\n", (long long)done,
                    a->prefix.c_str(), 0);
      }
    });
  });
}

}  // namespace spindle::cli::catalog_cli
