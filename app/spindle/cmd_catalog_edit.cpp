// spindle catalog fork | rollback | promote | tag | rm | gc | check (see cmd_catalog.cpp).

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "catalog_access.h"
#include "spindle/catalog/catalog.h"
#include "spindle/core/error.h"

namespace spindle::cli::catalog_cli {

using json = nlohmann::json;
using Run = std::function<void(catalog::Catalog&, const std::string& tenant, bool json)>;

using AccessRun = std::function<void(CatalogAccess&, const std::string& tenant, bool json)>;

// Defined in cmd_catalog.cpp.
void run_with_catalog(const Run& fn);
void run_with_catalog(const Run& fn, const catalog::CatalogOptions& options);
void run_with_access(const AccessRun& fn);
json policy_json(const catalog::Policy& p);
json revision_json(const catalog::Revision& r);
std::string format_time(int64_t ms);
void print_json(const json& j);
std::string actor();

namespace {

struct EditArgs {
  std::string address, name, tag;
  bool remove = false;
  double retention_days = 7;
  int64_t grace_seconds = 3600;
};

void print_head(const catalog::Policy& p, bool as_json) {
  if (as_json) {
    print_json(policy_json(p));
  } else {
    std::printf("%s@%s\n", p.address().c_str(), p.head.value_or("latest").c_str());
  }
}

}  // namespace

void register_catalog_edit(CLI::App& cmd) {
  auto a = std::make_shared<EditArgs>();

  CLI::App* fork = cmd.add_subcommand("fork", "Start a new policy at any revision (lineage kept)");
  fork->add_option("ADDRESS", a->address, "revision to start from (@latest: the head)")->required();
  fork->add_option("NAME", a->name, "name of the new policy")->required();
  fork->callback([a] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      const auto from = catalog::parse_address_or_name(a->address, tenant);
      print_head(cat.fork(tenant, from, a->name, actor()), as_json);
    });
  });

  CLI::App* rollback =
      cmd.add_subcommand("rollback", "Move a policy's head to an older revision (nothing deleted)");
  rollback->add_option("ADDRESS", a->address, "policy@revision to make the head")->required();
  rollback->callback([a] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      print_head(cat.rollback(tenant, catalog::parse_address_or_name(a->address, tenant), actor()),
                 as_json);
    });
  });

  CLI::App* promote = cmd.add_subcommand(
      "promote", "Make an ephemeral revision durable, so collection past its expiry keeps it");
  promote->add_option("ADDRESS", a->address, "policy@revision (@latest: the head)")->required();
  promote->callback([a] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      const auto addr = catalog::parse_address_or_name(a->address, tenant);
      const catalog::Revision r = cat.promote(tenant, addr, actor());
      if (as_json) {
        print_json(revision_json(r));
        return;
      }
      std::printf("%s@%s is durable\n", addr.policy_str().c_str(), r.id.c_str());
    });
  });

  CLI::App* tag = cmd.add_subcommand("tag", "Add (or --remove) a tag on a policy");
  tag->add_option("ADDRESS", a->address, "policy address")->required();
  tag->add_option("TAG", a->tag, "tag: letters, digits and . _ : -")->required();
  tag->add_flag("--remove", a->remove, "remove the tag instead");
  tag->callback([a] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      const auto addr = catalog::parse_address_or_name(a->address, tenant);
      SPINDLE_CHECK(addr.latest(), invalid_argument,
                    "tags label policies, not revisions: drop '@{}' from {}", addr.revision,
                    a->address);
      SPINDLE_CHECK(addr.tenant == tenant, not_found, "policy {} not found", addr.policy_str());
      const catalog::Policy p = a->remove ? cat.untag(tenant, addr.policy, a->tag, actor())
                                          : cat.tag(tenant, addr.policy, a->tag, actor());
      if (as_json) {
        print_json(policy_json(p));
        return;
      }
      std::string tags;
      for (const auto& t : p.tags) tags += (tags.empty() ? "" : ",") + t;
      std::printf("%s tags: %s\n", p.address().c_str(), tags.empty() ? "(none)" : tags.c_str());
    });
  });

  CLI::App* rm = cmd.add_subcommand("rm", "Delete a policy (soft: purged by gc after retention)");
  rm->add_option("ADDRESS", a->address, "policy address")->required();
  rm->callback([a] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      const auto addr = catalog::parse_address_or_name(a->address, tenant);
      SPINDLE_CHECK(addr.latest(), invalid_argument,
                    "rm deletes whole policies; revisions are immutable: drop '@{}'",
                    addr.revision);
      SPINDLE_CHECK(addr.tenant == tenant, not_found, "policy {} not found", addr.policy_str());
      cat.remove(tenant, addr.policy, actor());
      if (as_json) {
        print_json({{"deleted", addr.policy_str()}});
      } else {
        std::fprintf(stderr, "deleted %s (purged by gc after the retention period)\n",
                     addr.policy_str().c_str());
      }
    });
  });

  CLI::App* gc = cmd.add_subcommand(
      "gc",
      "Collect expired ephemeral revisions, purge deleted policies past retention, then "
      "unreferenced blobs (all tenants)");
  gc->add_option("--retention-days", a->retention_days, "keep deleted policies this long")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  gc->add_option("--grace-seconds", a->grace_seconds,
                 "never delete blobs younger than this (commits in flight)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  gc->callback([a] {
    run_with_catalog([&](catalog::Catalog& cat, const std::string&, bool as_json) {
      // Expired first: the blobs it releases but could not delete (a crash) go with gc's.
      const catalog::ExpiryReport e = cat.collect_expired(actor());
      const catalog::GcReport r =
          cat.gc({.actor = actor(),
                  .retention = std::chrono::milliseconds(int64_t(a->retention_days * 86400000.0)),
                  .blob_grace = std::chrono::seconds(a->grace_seconds)});
      const json j = {
          {"policies_purged", r.policies_purged},      {"revisions_purged", r.revisions_purged},
          {"policies_waiting", r.policies_waiting},    {"blobs_scanned", r.blobs.scanned},
          {"blobs_deleted", r.blobs.deleted},          {"bytes_freed", r.blobs.bytes_freed},
          {"temp_files_removed", r.blobs.temp_removed},
          {"revisions_expired", e.expired.size()},
          {"expired_blobs_deleted", e.blobs_deleted},
          {"expired_bytes_freed", e.bytes_freed}};
      if (as_json) {
        print_json(j);
        return;
      }
      std::printf("%s\n", fmt::format("collected {} expired ephemeral revisions: deleted {} blobs "
                                      "({} bytes)",
                                      e.expired.size(), e.blobs_deleted, e.bytes_freed)
                              .c_str());
      for (const auto& x : e.expired) {
        std::printf("expired spindle://%s/%s@%s\n", x.tenant.c_str(), x.policy.c_str(),
                    x.revision_id.c_str());
      }
      std::printf(
          "%s\n",
          fmt::format("purged {} policies and {} revisions ({} deleted policies wait for "
                      "live forks); deleted {} of {} blobs ({} bytes), {} temp files",
                      r.policies_purged, r.revisions_purged, r.policies_waiting, r.blobs.deleted,
                      r.blobs.scanned, r.blobs.bytes_freed, r.blobs.temp_removed)
              .c_str());
    });
  });

  CLI::App* check = cmd.add_subcommand(
      "check",
      "Verify the database (integrity, foreign keys) and every live revision's blobs (present, "
      "and hashing to their names); exits non-zero on any problem");
  auto quick = std::make_shared<bool>(false);
  check->add_flag("--quick", *quick, "Only check that blobs are present (do not read them)");
  check->callback([quick] {
    // Opened without the quick_check at open, so a damaged file gets the full report below
    // (integrity_check) instead of a refusal.
    catalog::CatalogOptions open;
    open.quick_check = false;
    run_with_catalog(
        [&](catalog::Catalog& cat, const std::string&, bool as_json) {
          const catalog::CheckReport r = cat.check({.verify_blobs = !*quick});
          if (as_json) {
            json corrupt = json::array();
            for (const auto& c : r.corrupt_blobs) {
              corrupt.push_back({{"blob", c.blob},
                                 {"path", c.path},
                                 {"revisions", c.revisions},
                                 {"detail", c.detail}});
            }
            print_json({{"ok", r.ok()},
                        {"integrity", r.integrity},
                        {"foreign_key_violations", r.foreign_keys},
                        {"revisions", r.revisions},
                        {"missing_blobs", r.missing_blobs},
                        {"blobs_verified", r.blobs_verified},
                        {"corrupt_blobs", corrupt}});
          } else {
            std::printf(
                "integrity %s; %zu foreign-key violations; %lld revisions, %zu missing blobs, "
                "%lld blobs verified, %zu corrupt\n",
                r.integrity.c_str(), r.foreign_keys.size(), (long long)r.revisions,
                r.missing_blobs.size(), (long long)r.blobs_verified, r.corrupt_blobs.size());
            for (const auto& b : r.missing_blobs) std::printf("missing blob %s\n", b.c_str());
            for (const auto& c : r.corrupt_blobs) {
              std::string revs;
              for (const auto& rev : c.revisions) revs += (revs.empty() ? "" : ", ") + rev;
              std::printf("corrupt blob %s (%s) of revision %s\n", c.blob.c_str(),
                          c.path.c_str(), revs.c_str());
            }
          }
          SPINDLE_CHECK(r.ok(), data_loss,
                        "catalog check failed: integrity {}, {} foreign-key violations, {} "
                        "missing and {} corrupt blobs",
                        r.integrity, r.foreign_keys.size(), r.missing_blobs.size(),
                        r.corrupt_blobs.size());
        },
        open);
  });
}

}  // namespace spindle::cli::catalog_cli
