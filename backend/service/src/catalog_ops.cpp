// catalog_list/search/show/lineage/fork/rollback/tag/delete and PEFT import/export, each run on
// the catalog thread with the caller's tenant.

#include "catalog_ops.h"

#include <nlohmann/json.hpp>

#include <random>

#include "spindle/adapters/peft.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"

namespace spindle::service {

namespace fs = std::filesystem;
using namespace protocol;

protocol::PolicyInfo policy_info(const catalog::Policy& p) {
  PolicyInfo i;
  i.address = p.address();
  i.tenant = p.tenant;
  i.name = p.name;
  i.base_id = p.base_id;
  i.rank = p.lora.rank;
  i.alpha = p.lora.alpha;
  for (auto t : p.lora.targets) i.targets.push_back(engine::lora_target_name(t));
  i.head = p.head.value_or("");
  i.forked_from = p.forked_from.value_or("");
  i.tags = p.tags;
  i.description = p.description;
  i.created_ms = p.created_ms;
  i.updated_ms = p.updated_ms;
  i.user_metadata_json = p.user_metadata_json;
  return i;
}

protocol::RevisionInfo revision_info(const catalog::Revision& r) {
  RevisionInfo i;
  i.id = r.id;
  i.policy = r.policy;
  i.parent = r.parent.value_or("");
  i.step = r.step;
  i.blob = r.blob;
  i.bytes = r.bytes;
  i.has_state = r.state_blob.has_value();
  i.metrics_json = r.metrics_json;
  i.created_ms = r.created_ms;
  i.expires_ms = r.expires_ms;
  i.expired = r.expired;
  return i;
}

catalog::Address client_address(Daemon& d, catalog::Catalog& cat, const Call& call,
                                const std::string& text) {
  catalog::Address a = catalog::parse_address_or_name(text, call.tenant);
  if (a.tenant != call.tenant) {
    d.log->warn("refused request {} ({}): tenant '{}' named another tenant's address {}",
                call.request_id, op_name(call.op), call.tenant, text);
    cat.get(call.tenant, a);  // throws not_found, exactly as for a missing policy
    SPINDLE_THROW(not_found, "policy {} not found", a.policy_str());
  }
  return a;
}

namespace {

std::string actor(const Call& call) { return "tenant:" + call.tenant; }

// The policy, the revision `rev` (when any) and its recent history (newest first, <= 20).
PolicyReply policy_reply(catalog::Catalog& cat, const std::string& tenant,
                         const catalog::Policy& p, std::optional<catalog::Revision> rev) {
  PolicyReply out;
  out.policy = policy_info(p);
  // The head through lineage, which lists an expired (collected) head too, where get() is
  // not_found: a policy stays showable after its ephemeral head expired.
  if (p.head) {
    const catalog::Lineage l = cat.lineage(tenant, {p.tenant, p.name, *p.head},
                                           {.max_ancestors = 19, .max_descendants = 0});
    if (!rev) rev = l.revision;
    out.recent.push_back(revision_info(l.revision));
    for (const auto& e : l.ancestors) out.recent.push_back(revision_info(e.revision));
  }
  if (rev) out.revision = revision_info(*rev);
  return out;
}

// A scratch directory under <data_dir>/tmp, removed when this goes out of scope.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const fs::path& data_dir) {
    std::random_device rd;
    path = data_dir / "tmp" / ("peft-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

PolicyReply import_peft(Daemon& d, catalog::Catalog& cat, const Call& call,
                        const ImportPeftRequest& req, const Frames& frames) {
  const std::string base_id = req.base_id.empty() ? d.default_base().id : req.base_id;
  const catalog::BaseModel base = cat.get_base(base_id);
  const ServedBase* served = d.find_base(base_id);
  const std::string_view bytes = read_bytes(req.adapter_model, frames, "adapter_model");
  const ScratchDir dir(d.paths.data_dir);
  write_file_atomic(dir.path / "adapter_config.json", req.adapter_config_json);
  write_file_atomic(dir.path / "adapter_model.safetensors", bytes);
  const adapters::PeftConfig cfg =
      adapters::parse_peft_config(req.adapter_config_json, "adapter_config.json");
  // Full shape validation against the served base; structural checks for another base.
  engine::LoraWeights weights = served ? adapters::load_peft(dir.path, served->weights.config)
                                       : adapters::read_peft_dir(dir.path).weights;
  try {
    cat.get_policy(call.tenant, req.name);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
    catalog::PolicySpec spec{.name = req.name,
                             .base_id = base.id,
                             .lora = {.rank = cfg.r,
                                      .alpha = cfg.lora_alpha,
                                      .targets = cfg.target_modules,
                                      .use_rslora = cfg.use_rslora},
                             .description = req.description,
                             .tags = {},
                             .user_metadata_json = {}};
    cat.create_policy(call.tenant, spec, actor(call));
  }
  catalog::CommitOptions opts;
  opts.actor = actor(call);
  opts.metrics_json = nlohmann::json{{"imported", "peft"}}.dump();
  const catalog::Revision r = cat.commit_revision(call.tenant, req.name, weights, opts);
  return policy_reply(cat, call.tenant, cat.get_policy(call.tenant, req.name), r);
}

void export_peft(Daemon& d, catalog::Catalog& cat, const Call& call, const AddressRequest& req) {
  const catalog::Address a = client_address(d, cat, call, req.address);
  const catalog::Resolved r = cat.get(call.tenant, a);
  const adapters::DecodedRevision rev =
      cat.read_revision(call.tenant, {a.tenant, a.policy, r.revision.id});
  const ScratchDir dir(d.paths.data_dir);
  const ServedBase* base = d.find_base(rev.meta.base_model_id);
  adapters::save_peft(rev.weights, dir.path,
                      {.base_model_name_or_path = rev.meta.base_model_id,
                       .base = base != nullptr ? &base->weights.config : nullptr});
  ExportPeftReply out;
  out.revision_id = r.revision.id;
  out.adapter_config_json = read_file_to_string(dir.path / "adapter_config.json");
  Frames frames;
  out.adapter_model = add_bytes(frames, read_file_to_string(dir.path / "adapter_model.safetensors"));
  d.replies->ok(call, std::move(out), std::move(frames));
}

void run_op(Daemon& d, catalog::Catalog& cat, const Call& call, const Request& req) {
  const std::string& tenant = call.tenant;
  switch (call.op) {
    case Op::catalog_list: {
      const auto& q = std::get<CatalogListRequest>(req.body);
      catalog::ListQuery lq;
      if (!q.base_id.empty()) lq.base_id = q.base_id;
      if (!q.tag.empty()) lq.tag = q.tag;
      lq.name_prefix = q.name_prefix;
      lq.limit = int(q.limit);
      lq.cursor = q.cursor;
      const catalog::PolicyPage page = cat.list(tenant, lq);
      PolicyListReply out;
      for (const auto& p : page.items) out.policies.push_back(policy_info(p));
      out.next_cursor = page.next_cursor;
      d.replies->ok(call, std::move(out));
      return;
    }
    case Op::catalog_search: {
      const auto& q = std::get<CatalogSearchRequest>(req.body);
      PolicyListReply out;
      for (const auto& p : cat.search(tenant, q.text, int(q.limit)))
        out.policies.push_back(policy_info(p));
      d.replies->ok(call, std::move(out));
      return;
    }
    case Op::catalog_show: {
      const auto& q = std::get<AddressRequest>(req.body);
      const catalog::Address a = client_address(d, cat, call, q.address);
      const catalog::Policy p = cat.get_policy(tenant, a.policy);
      // An explicit revision through lineage too: an expired one is shown (expired = true).
      std::optional<catalog::Revision> rev;
      if (!a.latest()) rev = cat.lineage(tenant, a, {.max_ancestors = 0, .max_descendants = 0}).revision;
      d.replies->ok(call, policy_reply(cat, tenant, p, rev));
      return;
    }
    case Op::catalog_lineage: {
      const auto& q = std::get<LineageRequest>(req.body);
      const catalog::Lineage l =
          cat.lineage(tenant, client_address(d, cat, call, q.address),
                      {.max_ancestors = q.max_ancestors, .max_descendants = q.max_descendants});
      LineageReply out;
      out.revision = revision_info(l.revision);
      for (const auto& e : l.ancestors) out.ancestors.push_back({revision_info(e.revision), e.depth});
      for (const auto& e : l.descendants)
        out.descendants.push_back({revision_info(e.revision), e.depth});
      out.ancestors_truncated = l.ancestors_truncated;
      out.descendants_truncated = l.descendants_truncated;
      d.replies->ok(call, std::move(out));
      return;
    }
    case Op::catalog_fork: {
      const auto& q = std::get<ForkRequest>(req.body);
      const catalog::Policy p = cat.fork(tenant, client_address(d, cat, call, q.address), q.name, actor(call));
      d.replies->ok(call, policy_reply(cat, tenant, p, std::nullopt));
      return;
    }
    case Op::catalog_rollback: {
      const auto& q = std::get<AddressRequest>(req.body);
      const catalog::Policy p = cat.rollback(tenant, client_address(d, cat, call, q.address), actor(call));
      d.replies->ok(call, policy_reply(cat, tenant, p, std::nullopt));
      return;
    }
    case Op::catalog_tag: {
      const auto& q = std::get<TagRequest>(req.body);
      const catalog::Address a = client_address(d, cat, call, q.address);
      catalog::Policy p = cat.get_policy(tenant, a.policy);
      for (const auto& t : q.add) p = cat.tag(tenant, a.policy, t, actor(call));
      for (const auto& t : q.remove) p = cat.untag(tenant, a.policy, t, actor(call));
      d.replies->ok(call, policy_reply(cat, tenant, p, std::nullopt));
      return;
    }
    case Op::catalog_promote: {
      const auto& q = std::get<AddressRequest>(req.body);
      const catalog::Address a = client_address(d, cat, call, q.address);
      const catalog::Revision rev = cat.promote_revision(tenant, a, actor(call));
      const catalog::Policy p = cat.get_policy(tenant, a.policy);
      d.replies->ok(call, policy_reply(cat, tenant, p, rev));
      return;
    }
    case Op::catalog_delete: {
      const auto& q = std::get<AddressRequest>(req.body);
      const catalog::Address a = client_address(d, cat, call, q.address);
      // A revision address would delete its whole policy: refuse rather than guess.
      SPINDLE_CHECK(a.latest(), invalid_argument,
                    "{} names revision {}: catalog_delete deletes a whole policy; pass "
                    "spindle://{}/{} (revisions are immutable; ephemeral ones expire)",
                    q.address, a.revision, a.tenant, a.policy);
      cat.remove(tenant, a.policy, actor(call));
      d.resolutions.drop_policy(tenant, a.policy);
      d.replies->ok(call, Empty{});
      return;
    }
    case Op::import_peft:
      d.replies->ok(call, import_peft(d, cat, call, std::get<ImportPeftRequest>(req.body), req.frames));
      return;
    case Op::export_peft:
      export_peft(d, cat, call, std::get<AddressRequest>(req.body));
      return;
    default:
      SPINDLE_THROW(internal, "{} is not a catalog operation", op_name(call.op));
  }
}

}  // namespace

void post_catalog_op(Daemon& d, Call call, protocol::Request request, CatalogThreadOp op) {
  d.catalog.post(
      [&d, op, call = std::move(call), request = std::move(request)](catalog::Catalog& cat) {
        try {
          op(d, cat, call, request);
        } catch (const std::exception& e) {
          reply_exception(d, call, e);
        }
      });
}

void dispatch_catalog_op(Daemon& d, Call call, protocol::Request request) {
  post_catalog_op(d, std::move(call), std::move(request), run_op);
}

}  // namespace spindle::service
