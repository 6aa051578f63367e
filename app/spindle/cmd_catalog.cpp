// spindle catalog: the policy catalog over a data directory.
//   spindle catalog [--data-dir DIR] [--tenant T] [--json] <ls|show|lineage|search|fork|
//                    rollback|promote|tag|rm|gc|check|import-peft|export-peft|bulk-register> ...
// Data dir: --data-dir, else $SPINDLE_DATA_DIR, else $XDG_DATA_HOME/spindle, else
// ~/.local/share/spindle. Addresses are spindle://<tenant>/<policy>[@<rev>|@latest] or the
// short form <policy>[@<rev>] in --tenant. Stdout carries results (human tables, or one JSON
// document with --json); notes go to stderr.
//
// This file: the shared context and the read commands (ls, show, lineage, search).
// cmd_catalog_edit.cpp: fork, rollback, promote, tag, rm, gc, check. cmd_catalog_peft.cpp: PEFT I/O.
// cmd_catalog_bulk.cpp: bulk-register.

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>

#include "catalog_access.h"
#include "commands.h"
#include "remote.h"
#include "spindle/catalog/catalog.h"
#include "spindle/catalog/data_dir.h"
#include "spindle/core/error.h"

namespace spindle::cli {
namespace catalog_cli {

using json = nlohmann::json;
using Run = std::function<void(catalog::Catalog&, const std::string& tenant, bool json)>;
// Commands that also work against a running spindled (--endpoint / --token).
using AccessRun = std::function<void(CatalogAccess&, const std::string& tenant, bool json)>;

// Defined in cmd_catalog_edit.cpp and cmd_catalog_peft.cpp.
void register_catalog_edit(CLI::App& catalog);
void register_catalog_peft(CLI::App& catalog);
void register_catalog_bulk(CLI::App& catalog);

namespace {

struct Options {
  std::string data_dir;
  std::string tenant = "local";
  bool json = false;
  RemoteOptions remote;  // remote.data_dir unused: data_dir above serves both
};

// Set by register_catalog (once per process), read when a subcommand runs.
std::shared_ptr<Options> g_options;

}  // namespace

std::string actor() {
  const char* user = std::getenv("USER");
  return fmt::format("cli:{}", user && *user ? user : "unknown");
}

std::string format_time(int64_t ms) {
  const std::time_t t = std::time_t(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "2024-06-11", "2024-06-11T14:03:12Z" or milliseconds since the epoch.
int64_t parse_time(const std::string& s, const char* option) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  char tail = 0;
  std::tm tm{};
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2dZ%c", &y, &mo, &d, &h, &mi, &sec, &tail) ==
          6 ||
      std::sscanf(s.c_str(), "%4d-%2d-%2d%c", &y, &mo, &d, &tail) == 3) {
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    return int64_t(timegm(&tm)) * 1000;
  }
  char* end = nullptr;
  const long long ms = std::strtoll(s.c_str(), &end, 10);
  SPINDLE_CHECK(!s.empty() && end && *end == '\0', invalid_argument,
                "{} '{}': expected YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ or milliseconds", option, s);
  return ms;
}

std::string short_id(const std::optional<std::string>& id) {
  return id ? id->substr(0, 12) : "-";
}

json policy_json(const catalog::Policy& p) {
  json targets = json::array();
  for (auto t : p.lora.targets) targets.push_back(engine::lora_target_name(t));
  return {{"address", p.address()},
          {"tenant", p.tenant},
          {"name", p.name},
          {"base", p.base_id},
          {"lora",
           {{"rank", p.lora.rank},
            {"alpha", p.lora.alpha},
            {"targets", targets},
            {"use_rslora", p.lora.use_rslora}}},
          {"head", p.head ? json(*p.head) : json(nullptr)},
          {"forked_from", p.forked_from ? json(*p.forked_from) : json(nullptr)},
          {"tags", p.tags},
          {"description", p.description},
          {"created_ms", p.created_ms},
          {"updated_ms", p.updated_ms},
          {"user_metadata",
           p.user_metadata_json.empty() ? json(nullptr) : json::parse(p.user_metadata_json)}};
}

json revision_json(const catalog::Revision& r) {
  return {{"id", r.id},
          {"policy", r.policy},
          {"policy_deleted", r.policy_deleted},
          {"parent", r.parent ? json(*r.parent) : json(nullptr)},
          {"step", r.step},
          {"blob", r.blob},
          {"bytes", r.bytes},
          {"metrics", json::parse(r.metrics_json)},
          {"created_ms", r.created_ms},
          {"expires_ms", r.expires_ms},
          {"expired", r.expired}};
}

std::string expiry_text(const catalog::Revision& r) {
  if (r.expired) return fmt::format("expired at {}", format_time(r.expires_ms));
  if (r.expires_ms != 0) return fmt::format("ephemeral, expires {}", format_time(r.expires_ms));
  return "";
}

catalog::Revision shown_revision(CatalogAccess& cat, const std::string& tenant,
                                 const catalog::Address& a) {
  try {
    return cat.get(tenant, a).revision;
  } catch (const Error& e) {
    // An expired revision is not servable (get), but still listed: lineage resolves it.
    if (e.code() != ErrorCode::not_found) throw;
    catalog::Lineage l;
    try {
      l = cat.lineage(tenant, a, {.max_ancestors = 0, .max_descendants = 0});
    } catch (const Error&) {
      throw e;
    }
    if (!l.revision.expired) throw;
    return l.revision;
  }
}

void print_json(const json& j) {
  std::printf("%s\n", j.dump(2).c_str());
}

// Opens the catalog named by the options and runs `fn` with it.
void run_with_catalog(const Run& fn, const catalog::CatalogOptions& options) {
  SPINDLE_ASSERT(g_options != nullptr);
  const std::filesystem::path dir =
      catalog::resolve_data_dir(g_options->data_dir);
  SPINDLE_CHECK(g_options->remote.endpoint.empty(), unsupported,
                "this catalog command works on a local data directory only (drop --endpoint)");
  catalog::check_name("tenant", g_options->tenant);
  catalog::Catalog cat(dir, options);
  fn(cat, g_options->tenant, g_options->json);
}

// Without the quick_check at open: it reads the whole file (2.3 s warm, 8.5 s cold for 10^6
// policies), too slow for one command; damage a command reaches is still data_loss naming
// catalog.db (SQLITE_CORRUPT), and `spindle catalog check` is the full check.
void run_with_catalog(const Run& fn) {
  catalog::CatalogOptions options;
  options.quick_check = false;
  run_with_catalog(fn, options);
}

// With --endpoint or --token, or $SPINDLE_ENDPOINT set (as `. spindle.env` of a Slurm job
// sets it, and the other remote commands read it), the command goes through spindled as the
// token's tenant; otherwise it opens the data directory's catalog.
void run_with_access(const AccessRun& fn) {
  SPINDLE_ASSERT(g_options != nullptr);
  const char* env = std::getenv("SPINDLE_ENDPOINT");
  if (!g_options->remote.endpoint.empty() || !g_options->remote.token.empty() ||
      (env != nullptr && *env != '\0')) {
    RemoteOptions r = g_options->remote;
    r.data_dir = g_options->data_dir;
    const auto client = connect_remote(r);
    const auto access = remote_catalog_access(*client);
    fn(*access, access->tenant(), g_options->json);
    return;
  }
  run_with_catalog([&](catalog::Catalog& cat, const std::string& tenant, bool as_json) {
    const auto access = local_catalog_access(cat, tenant);
    fn(*access, tenant, as_json);
  });
}

namespace {

// A METADATA column (user metadata, compact, cut at 48 characters) only when a row has some.
void print_policy_table(const std::vector<catalog::Policy>& items) {
  if (items.empty()) {
    std::fprintf(stderr, "(no policies)\n");
    return;
  }
  size_t w = 4, wb = 14, wt = 4;
  bool any_meta = false;
  std::vector<std::string> tags(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& p = items[i];
    for (const auto& t : p.tags) tags[i] += (tags[i].empty() ? "" : ",") + t;
    w = std::max(w, p.name.size());
    wb = std::max(wb, p.base_id.size());
    wt = std::max(wt, tags[i].size());
    any_meta = any_meta || !p.user_metadata_json.empty();
  }
  auto line = [&](const std::string& name, const std::string& base, const std::string& rank,
                  const std::string& head, const std::string& updated, const std::string& tag,
                  const std::string& meta) {
    std::string row = fmt::format("{:<{}}  {:<{}}  {:>4}  {:<12}  {:<20}  ", name, w, base, wb,
                                  rank, head, updated);
    row += any_meta ? fmt::format("{:<{}}  {}", tag, wt, meta) : tag;
    while (!row.empty() && row.back() == ' ') row.pop_back();
    std::printf("%s\n", row.c_str());
  };
  line("NAME", "BASE", "RANK", "HEAD", "UPDATED", "TAGS", "METADATA");
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& p = items[i];
    std::string meta;
    if (!p.user_metadata_json.empty()) {
      meta = json::parse(p.user_metadata_json).dump();
      if (meta.size() > 48) meta = meta.substr(0, 45) + "...";
    }
    line(p.name, p.base_id, std::to_string(p.lora.rank), short_id(p.head),
         format_time(p.updated_ms), tags[i], meta);
  }
}

void print_revision_line(const catalog::Revision& r, const std::string& mark) {
  const std::string expiry = expiry_text(r);
  std::printf("%s\n",
              fmt::format("{:>4}  {}  {:<24}  step {:<6}  {}  {}{}", mark, r.id.substr(0, 12),
                          r.policy + (r.policy_deleted ? " (deleted)" : ""), r.step,
                          format_time(r.created_ms), r.metrics_json,
                          expiry.empty() ? "" : "  [" + expiry + "]")
                  .c_str());
}

struct LsArgs {
  std::string base, tag, prefix, since, until, sort = "name", cursor;
  int limit = 50;
};

void register_read(CLI::App& cmd) {
  auto ls_args = std::make_shared<LsArgs>();
  CLI::App* ls = cmd.add_subcommand("ls", "List policies, a keyset page at a time");
  ls->add_option("--base", ls_args->base, "only policies on this base model");
  ls->add_option("--tag", ls_args->tag, "only policies with this tag");
  ls->add_option("--prefix", ls_args->prefix, "only names starting with this");
  ls->add_option("--since", ls_args->since, "created at or after (YYYY-MM-DD[THH:MM:SSZ] or ms)");
  ls->add_option("--until", ls_args->until, "created before");
  ls->add_option("--sort", ls_args->sort, "name (A-Z) or updated (newest first)")
      ->check(CLI::IsMember({"name", "updated"}))
      ->capture_default_str();
  ls->add_option("--limit", ls_args->limit, "page size (1..1000)")->capture_default_str();
  ls->add_option("--cursor", ls_args->cursor,
                 "continue after a previous page (printed at its end)");
  ls->callback([ls_args] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      catalog::ListQuery q;
      if (!ls_args->base.empty()) q.base_id = ls_args->base;
      if (!ls_args->tag.empty()) q.tag = ls_args->tag;
      q.name_prefix = ls_args->prefix;
      if (!ls_args->since.empty()) q.created_from_ms = parse_time(ls_args->since, "--since");
      if (!ls_args->until.empty()) q.created_before_ms = parse_time(ls_args->until, "--until");
      q.sort =
          ls_args->sort == "updated" ? catalog::PolicySort::updated : catalog::PolicySort::name;
      q.limit = ls_args->limit;
      q.cursor = ls_args->cursor;
      const catalog::PolicyPage page = cat.list(tenant, q);
      if (as_json) {
        json items = json::array();
        for (const auto& p : page.items) items.push_back(policy_json(p));
        print_json({{"items", items}, {"next_cursor", page.next_cursor}});
        return;
      }
      print_policy_table(page.items);
      if (!page.next_cursor.empty()) {
        std::fprintf(stderr, "more: --cursor %s\n", page.next_cursor.c_str());
      }
    });
  });

  auto address = std::make_shared<std::string>();
  CLI::App* show = cmd.add_subcommand("show", "Show a policy and the revision an address names");
  show->add_option("ADDRESS", *address, "spindle://tenant/policy[@rev] or policy[@rev]")
      ->required();
  show->callback([address] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      const catalog::Address a = catalog::parse_address_or_name(*address, tenant);
      const catalog::Policy p = cat.get_policy(tenant, a.policy);
      std::optional<catalog::Revision> rev;
      if (!a.latest() || p.head) rev = shown_revision(cat, tenant, a);
      if (as_json) {
        print_json({{"policy", policy_json(p)}, {"revision", rev ? revision_json(*rev) : json()}});
        return;
      }
      std::string targets;
      for (auto t : p.lora.targets)
        targets += (targets.empty() ? "" : ",") + std::string(engine::lora_target_name(t));
      std::string tags;
      for (const auto& t : p.tags) tags += (tags.empty() ? "" : ",") + t;
      std::printf("%s",
                  fmt::format("policy       {}\nbase         {}\nlora         rank {}, alpha {}, "
                              "targets {}{}\nhead         {}\nforked from  {}\ntags         "
                              "{}\ndescription  {}\ncreated      {}\nupdated      {}\n",
                              p.address(), p.base_id, p.lora.rank, p.lora.alpha, targets,
                              p.lora.use_rslora ? ", rsLoRA" : "", p.head.value_or("-"),
                              p.forked_from.value_or("-"), tags, p.description,
                              format_time(p.created_ms), format_time(p.updated_ms))
                      .c_str());
      if (!p.user_metadata_json.empty()) {
        std::printf("user meta    %s\n", json::parse(p.user_metadata_json).dump().c_str());
      }
      if (rev) {
        std::printf(
            "%s", fmt::format("revision     {}\n  parent     {}\n  step       {}\n  blob    "
                              "   {} ({} bytes)\n  metrics    {}\n  created    {}\n",
                              rev->id, rev->parent.value_or("-"), rev->step, rev->blob, rev->bytes,
                              rev->metrics_json, format_time(rev->created_ms))
                      .c_str());
        const std::string expiry = expiry_text(*rev);
        const std::string lifetime =
            expiry.empty()  ? std::string("durable")
            : rev->expired  ? expiry + " (not servable: its weights were released)"
                            : expiry + " (promote it to keep it)";
        std::printf("  lifetime   %s\n", lifetime.c_str());
      }
    });
  });

  auto lin_address = std::make_shared<std::string>();
  auto lin_opts = std::make_shared<catalog::LineageOptions>();
  CLI::App* lineage = cmd.add_subcommand("lineage", "Ancestors and descendants of a revision");
  lineage->add_option("ADDRESS", *lin_address, "policy address (@latest: the head)")->required();
  lineage->add_option("--ancestors", lin_opts->max_ancestors, "most ancestors to show")
      ->capture_default_str();
  lineage->add_option("--descendants", lin_opts->max_descendants, "most descendants to show")
      ->capture_default_str();
  lineage->callback([lin_address, lin_opts] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      const auto l =
          cat.lineage(tenant, catalog::parse_address_or_name(*lin_address, tenant), *lin_opts);
      if (as_json) {
        json up = json::array(), down = json::array();
        for (const auto& e : l.ancestors)
          up.push_back({{"depth", e.depth}, {"revision", revision_json(e.revision)}});
        for (const auto& e : l.descendants)
          down.push_back({{"depth", e.depth}, {"revision", revision_json(e.revision)}});
        print_json({{"revision", revision_json(l.revision)},
                    {"ancestors", up},
                    {"descendants", down},
                    {"ancestors_truncated", l.ancestors_truncated},
                    {"descendants_truncated", l.descendants_truncated}});
        return;
      }
      if (l.ancestors_truncated) std::printf("   …  (older ancestors not shown)\n");
      for (auto it = l.ancestors.rbegin(); it != l.ancestors.rend(); ++it) {
        print_revision_line(it->revision, fmt::format("-{}", it->depth));
      }
      print_revision_line(l.revision, "*");
      for (const auto& e : l.descendants)
        print_revision_line(e.revision, fmt::format("+{}", e.depth));
      if (l.descendants_truncated) std::printf("   …  (more descendants not shown)\n");
    });
  });

  auto text = std::make_shared<std::string>();
  auto search_limit = std::make_shared<int>(20);
  CLI::App* search =
      cmd.add_subcommand("search", "Full-text search over names, descriptions, tags");
  search->add_option("TEXT", *text, "words; each must match (as a prefix)")->required();
  search->add_option("--limit", *search_limit, "most results (1..1000)")->capture_default_str();
  search->callback([text, search_limit] {
    run_with_access([&](CatalogAccess& cat, const std::string& tenant, bool as_json) {
      const auto found = cat.search(tenant, *text, *search_limit);
      if (as_json) {
        json items = json::array();
        for (const auto& p : found) items.push_back(policy_json(p));
        print_json({{"items", items}});
        return;
      }
      print_policy_table(found);
    });
  });
}

}  // namespace
}  // namespace catalog_cli

void register_catalog(CLI::App& app) {
  using namespace catalog_cli;
  g_options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("catalog", "Browse and edit the policy catalog");
  cmd->require_subcommand(1);
  cmd->fallthrough();  // --json / --tenant / --data-dir may also follow the subcommand
  cmd->add_option("--data-dir", g_options->data_dir,
                  "data directory (default: $SPINDLE_DATA_DIR, $XDG_DATA_HOME/spindle or "
                  "~/.local/share/spindle)");
  cmd->add_option("--tenant", g_options->tenant, "tenant to act as")->capture_default_str();
  cmd->add_flag("--json", g_options->json, "print one JSON document instead of a table");
  add_remote_options(*cmd, g_options->remote, /*with_data_dir=*/false);
  register_read(*cmd);
  register_catalog_edit(*cmd);
  register_catalog_peft(*cmd);
  register_catalog_bulk(*cmd);
}

}  // namespace spindle::cli
