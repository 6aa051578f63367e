// Local and remote implementations of CatalogAccess (see catalog_access.h).

#include "catalog_access.h"

#include "remote.h"
#include "spindle/core/error.h"

namespace spindle::cli {

namespace {

class LocalAccess final : public CatalogAccess {
 public:
  LocalAccess(catalog::Catalog& cat, std::string tenant) : cat_(cat), tenant_(std::move(tenant)) {}
  catalog::PolicyPage list(std::string_view t, const catalog::ListQuery& q) override {
    return cat_.list(t, q);
  }
  std::vector<catalog::Policy> search(std::string_view t, std::string_view text, int limit) override {
    return cat_.search(t, text, limit);
  }
  catalog::Policy get_policy(std::string_view t, std::string_view name) override {
    return cat_.get_policy(t, name);
  }
  catalog::Resolved get(std::string_view t, const catalog::Address& a) override {
    return cat_.get(t, a);
  }
  catalog::Lineage lineage(std::string_view t, const catalog::Address& a,
                           const catalog::LineageOptions& o) override {
    return cat_.lineage(t, a, o);
  }
  catalog::Policy fork(std::string_view t, const catalog::Address& from, std::string_view name,
                       std::string_view actor) override {
    return cat_.fork(t, from, name, actor);
  }
  catalog::Policy rollback(std::string_view t, const catalog::Address& to,
                           std::string_view actor) override {
    return cat_.rollback(t, to, actor);
  }
  catalog::Revision promote(std::string_view t, const catalog::Address& a,
                            std::string_view actor) override {
    return cat_.promote_revision(t, a, actor);
  }
  catalog::Policy tag(std::string_view t, std::string_view p, std::string_view tag,
                      std::string_view actor) override {
    return cat_.tag(t, p, tag, actor);
  }
  catalog::Policy untag(std::string_view t, std::string_view p, std::string_view tag,
                        std::string_view actor) override {
    return cat_.untag(t, p, tag, actor);
  }
  void remove(std::string_view t, std::string_view p, std::string_view actor) override {
    cat_.remove(t, p, actor);
  }
  std::string tenant() const override { return tenant_; }

 private:
  catalog::Catalog& cat_;
  std::string tenant_;
};

// Each call is one request; ClientError becomes spindle::Error with the closest code.
class RemoteAccess final : public CatalogAccess {
 public:
  explicit RemoteAccess(protocol::Client& c) : c_(c) {}

  catalog::PolicyPage list(std::string_view, const catalog::ListQuery& q) override {
    SPINDLE_CHECK(!q.created_from_ms && !q.created_before_ms &&
                      q.sort == catalog::PolicySort::name,
                  unsupported, "--since, --until and --sort updated work on a local data "
                  "directory only (drop --endpoint)");
    protocol::CatalogListRequest r;
    r.base_id = q.base_id.value_or("");
    r.tag = q.tag.value_or("");
    r.name_prefix = q.name_prefix;
    r.limit = uint32_t(q.limit);
    r.cursor = q.cursor;
    const auto reply = guarded([&] { return c_.catalog_list(r); });
    catalog::PolicyPage page;
    for (const auto& p : reply.policies) page.items.push_back(to_catalog(p));
    page.next_cursor = reply.next_cursor;
    return page;
  }
  std::vector<catalog::Policy> search(std::string_view, std::string_view text, int limit) override {
    const auto reply = guarded([&] { return c_.catalog_search(std::string(text), uint32_t(limit)); });
    std::vector<catalog::Policy> out;
    for (const auto& p : reply.policies) out.push_back(to_catalog(p));
    return out;
  }
  catalog::Policy get_policy(std::string_view, std::string_view name) override {
    const catalog::Address a{tenant(), std::string(name), ""};
    return to_catalog(guarded([&] { return c_.catalog_show(a.policy_str()); }).policy);
  }
  catalog::Resolved get(std::string_view, const catalog::Address& a) override {
    const auto reply = guarded([&] { return c_.catalog_show(a.str()); });
    SPINDLE_CHECK(!reply.revision.id.empty(), not_found, "{} has no revision yet", a.str());
    return {to_catalog(reply.policy), to_catalog(reply.revision)};
  }
  catalog::Lineage lineage(std::string_view, const catalog::Address& a,
                           const catalog::LineageOptions& o) override {
    const auto r = guarded(
        [&] { return c_.catalog_lineage(a.str(), o.max_ancestors, o.max_descendants); });
    catalog::Lineage l;
    l.revision = to_catalog(r.revision);
    for (const auto& e : r.ancestors) l.ancestors.push_back({to_catalog(e.revision), e.depth});
    for (const auto& e : r.descendants) l.descendants.push_back({to_catalog(e.revision), e.depth});
    l.ancestors_truncated = r.ancestors_truncated;
    l.descendants_truncated = r.descendants_truncated;
    return l;
  }
  catalog::Policy fork(std::string_view, const catalog::Address& from, std::string_view name,
                       std::string_view) override {
    return to_catalog(guarded([&] { return c_.catalog_fork(from.str(), std::string(name)); }).policy);
  }
  catalog::Policy rollback(std::string_view, const catalog::Address& to, std::string_view) override {
    return to_catalog(guarded([&] { return c_.catalog_rollback(to.str()); }).policy);
  }
  catalog::Revision promote(std::string_view, const catalog::Address& a,
                            std::string_view) override {
    // PolicyReply::revision is the promoted revision (the daemon's catalog_promote).
    const auto reply = guarded([&] {
      const protocol::Reply r =
          c_.call(protocol::Op::catalog_promote, protocol::AddressRequest{a.str()});
      return std::get<protocol::PolicyReply>(r.body);
    });
    return to_catalog(reply.revision);
  }
  catalog::Policy tag(std::string_view, std::string_view p, std::string_view tag,
                      std::string_view) override {
    const catalog::Address a{tenant(), std::string(p), ""};
    return to_catalog(
        guarded([&] { return c_.catalog_tag(a.policy_str(), {std::string(tag)}, {}); }).policy);
  }
  catalog::Policy untag(std::string_view, std::string_view p, std::string_view tag,
                        std::string_view) override {
    const catalog::Address a{tenant(), std::string(p), ""};
    return to_catalog(
        guarded([&] { return c_.catalog_tag(a.policy_str(), {}, {std::string(tag)}); }).policy);
  }
  void remove(std::string_view, std::string_view p, std::string_view) override {
    const catalog::Address a{tenant(), std::string(p), ""};
    guarded([&] {
      c_.catalog_delete(a.policy_str());
      return 0;
    });
  }
  std::string tenant() const override { return c_.server().tenant; }

 private:
  template <class F>
  auto guarded(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const protocol::ClientError& e) {
      const std::string& code = e.code();
      if (code == "not_found") SPINDLE_THROW(not_found, "{}", e.what());
      if (code == "invalid_argument" || code == "already_exists" || code == "limit_exceeded" ||
          code == "failed_precondition")
        SPINDLE_THROW(invalid_argument, "{}", e.what());
      if (code == "unsupported") SPINDLE_THROW(unsupported, "{}", e.what());
      SPINDLE_THROW(io, "{}", e.what());
    }
  }
  protocol::Client& c_;
};

}  // namespace

std::unique_ptr<CatalogAccess> local_catalog_access(catalog::Catalog& cat, std::string tenant) {
  return std::make_unique<LocalAccess>(cat, std::move(tenant));
}

std::unique_ptr<CatalogAccess> remote_catalog_access(protocol::Client& client) {
  return std::make_unique<RemoteAccess>(client);
}

}  // namespace spindle::cli
