// spindle catalog import-peft | export-peft (see cmd_catalog.cpp).
//   import-peft DIR NAME [--base ID] [--base-path PATH]: creates the policy if needed (its
//     LoRA spec from adapter_config.json) and commits the adapter as a new revision. An
//     unregistered base is registered (from --base-path when given: arch and checksum from the
//     files). When the base's path holds an HF config.json, every tensor shape is validated
//     against it; otherwise only the adapter's internal consistency is checked.
//   export-peft ADDRESS DIR: writes the revision as a PEFT directory (adapter_config.json +
//     adapter_model.safetensors) that Hugging Face PEFT loads.

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "spindle/adapters/optimizer_state.h"
#include "spindle/adapters/peft.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/adapters/sha256.h"
#include "spindle/catalog/catalog.h"
#include "spindle/adapters/base_checksum.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/loader.h"

namespace spindle::cli::catalog_cli {

using json = nlohmann::json;
using Run = std::function<void(catalog::Catalog&, const std::string& tenant, bool json)>;
namespace fs = std::filesystem;

// Defined in cmd_catalog.cpp.
void run_with_catalog(const Run& fn);
json revision_json(const catalog::Revision& r);
void print_json(const json& j);
std::string actor();

namespace {

struct PeftArgs {
  std::string dir, name, address;
  std::string base, base_path, description;
  std::vector<std::string> tags;
  int64_t step = -1;
  std::string dtype = "f32";
};

DType parse_dtype(const std::string& s) {
  if (s == "f16") return DType::f16;
  if (s == "bf16") return DType::bf16;
  return DType::f32;
}

// The catalog id for the adapter's base: --base, else base_model_name_or_path when it is a
// valid id (a Hugging Face id like "Qwen/Qwen3-0.6B" is), else its last path component (an
// absolute path's).
std::string choose_base_id(const PeftArgs& a, const adapters::PeftConfig& cfg) {
  if (!a.base.empty()) return a.base;
  const std::string& nop = cfg.base_model_name_or_path;
  for (const std::string& candidate : {nop, fs::path(nop).filename().string()}) {
    try {
      catalog::check_base_id(candidate);
      return candidate;
    } catch (const Error&) {
    }
  }
  SPINDLE_THROW(invalid_argument,
                "adapter_config.json names base '{}', which is not a usable id; pass --base ID",
                nop);
}

void ensure_base(catalog::Catalog& cat, const std::string& id, const PeftArgs& a,
                 const adapters::PeftConfig& cfg) {
  try {
    cat.get_base(id);
    return;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
  }
  catalog::BaseModel base;
  base.id = id;
  base.arch = "unknown";
  base.path = cfg.base_model_name_or_path;
  if (!a.base_path.empty()) {
    const fs::path p = fs::absolute(a.base_path);
    base.path = p.string();
    base.arch =
        fs::is_directory(p)
            ? engine::arch_name(engine::parse_hf_config(read_file_to_string(p / "config.json"),
                                                        (p / "config.json").string())
                                    .arch)
            : "llama";
    base.checksum = adapters::base_checksum(p);
  }
  cat.register_base(base, actor());
  std::fprintf(stderr, "registered base model %s (arch %s%s)\n", id.c_str(), base.arch.c_str(),
               base.path.empty() ? "" : (", path " + base.path).c_str());
}

// Full validation when the base's config is at hand, structural checks otherwise.
engine::LoraWeights read_adapter(const fs::path& dir, const catalog::BaseModel& base,
                                 adapters::PeftImport imported) {
  const fs::path config = fs::path(base.path) / "config.json";
  std::error_code ec;
  if (!base.path.empty() && fs::is_regular_file(config, ec)) {
    return adapters::load_peft(
        dir, engine::parse_hf_config(read_file_to_string(config), config.string()));
  }
  std::fprintf(stderr,
               "note: base %s has no local config.json; shapes checked for consistency "
               "only\n",
               base.id.c_str());
  return std::move(imported.weights);
}

}  // namespace

void register_catalog_peft(CLI::App& cmd) {
  auto a = std::make_shared<PeftArgs>();

  CLI::App* imp = cmd.add_subcommand("import-peft", "Commit a PEFT LoRA directory as a revision");
  imp->add_option("DIR", a->dir, "PEFT adapter directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  imp->add_option("NAME", a->name, "policy name (created if missing)")->required();
  imp->add_option("--base", a->base, "base model id (default: from adapter_config.json)");
  imp->add_option("--base-path", a->base_path,
                  "HF directory or checkpoint of the base, to register it if new");
  imp->add_option("--description", a->description, "description of a new policy");
  imp->add_option("--tag", a->tags, "tag for a new policy (repeatable)");
  imp->add_option("--step", a->step, "training step of the revision (default: parent's + 1)");
  imp->add_option("--dtype", a->dtype, "tensor dtype stored")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  imp->callback([a] {
    run_with_catalog([&](catalog::Catalog& cat, const std::string& tenant, bool as_json) {
      adapters::PeftImport imported = adapters::read_peft_dir(a->dir);
      const std::string base_id = choose_base_id(*a, imported.config);
      ensure_base(cat, base_id, *a, imported.config);
      const catalog::BaseModel base = cat.get_base(base_id);
      const adapters::PeftConfig cfg = imported.config;
      const engine::LoraWeights weights = read_adapter(a->dir, base, std::move(imported));
      try {
        cat.get_policy(tenant, a->name);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::not_found) throw;
        catalog::PolicySpec spec{.name = a->name,
                                 .base_id = base_id,
                                 .lora = {.rank = cfg.r,
                                          .alpha = cfg.lora_alpha,
                                          .targets = cfg.target_modules,
                                          .use_rslora = cfg.use_rslora},
                                 .description = a->description,
                                 .tags = a->tags,
                                 .user_metadata_json = {}};
        cat.create_policy(tenant, spec, actor());
      }
      catalog::CommitOptions opts;
      opts.actor = actor();
      opts.dtype = parse_dtype(a->dtype);
      if (a->step >= 0) opts.step = a->step;
      opts.metrics_json = json{{"imported_from", fs::absolute(a->dir).string()}}.dump();
      // An optimizer_state.safetensors beside the adapter (spindle sft writes one) travels
      // with the revision as its own blob.
      std::optional<engine::AdamW> state;
      if (adapters::has_optimizer_state(a->dir)) state = adapters::load_optimizer_state(a->dir);
      opts.optimizer_state = state ? &*state : nullptr;
      const catalog::Revision r = cat.commit_revision(tenant, a->name, weights, opts);
      if (as_json) {
        print_json(revision_json(r));
      } else {
        std::printf("spindle://%s/%s@%s\n", tenant.c_str(), a->name.c_str(), r.id.c_str());
      }
    });
  });

  CLI::App* exp = cmd.add_subcommand("export-peft", "Write a revision as a PEFT directory");
  exp->add_option("ADDRESS", a->address, "policy[@rev] or spindle:// address")->required();
  exp->add_option("DIR", a->dir, "output directory (created if missing)")->required();
  exp->add_option("--dtype", a->dtype, "tensor dtype written")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  exp->add_option("--base-path", a->base_path,
                  "the base's HF directory: its config.json names a DeepSeek sparse layer's "
                  "MLP LoRA as its shared experts (mlp.shared_experts.*), as PEFT does");
  exp->callback([a] {
    run_with_catalog([&](catalog::Catalog& cat, const std::string& tenant, bool as_json) {
      const catalog::Address addr = catalog::parse_address_or_name(a->address, tenant);
      const catalog::Resolved r = cat.get(tenant, addr);
      const adapters::DecodedRevision d =
          cat.read_revision(tenant, {addr.tenant, addr.policy, r.revision.id});
      std::optional<engine::ModelConfig> base;
      if (!a->base_path.empty()) {
        const auto config = std::filesystem::path(a->base_path) / "config.json";
        base = engine::parse_hf_config(read_file_to_string(config), config.string());
      }
      adapters::save_peft(d.weights, a->dir,
                          {.base_model_name_or_path = d.meta.base_model_id,
                           .dtype = parse_dtype(a->dtype),
                           .base = base ? &*base : nullptr});
      const auto state = cat.read_optimizer_state(tenant, {addr.tenant, addr.policy, r.revision.id});
      if (state) adapters::save_optimizer_state(*state, a->dir);
      if (as_json) {
        print_json({{"revision", revision_json(r.revision)}, {"dir", a->dir}});
      } else {
        std::fprintf(stderr, "wrote %s@%s to %s\n", r.policy.address().c_str(),
                     r.revision.id.c_str(), a->dir.c_str());
      }
    });
  });
}

}  // namespace spindle::cli::catalog_cli
