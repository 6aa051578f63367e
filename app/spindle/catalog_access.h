#pragma once
// What `spindle catalog` subcommands need from a catalog, either opened locally on a data
// directory or reached through a running spindled (--endpoint). Remote calls act as the token's
// tenant; `tenant` arguments are then ignored (the server scopes every address to the token).

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/catalog/catalog.h"
#include "spindle/protocol/client.h"

namespace spindle::cli {

class CatalogAccess {
 public:
  virtual ~CatalogAccess() = default;
  virtual catalog::PolicyPage list(std::string_view tenant, const catalog::ListQuery& q) = 0;
  virtual std::vector<catalog::Policy> search(std::string_view tenant, std::string_view text,
                                              int limit) = 0;
  virtual catalog::Policy get_policy(std::string_view tenant, std::string_view name) = 0;
  virtual catalog::Resolved get(std::string_view tenant, const catalog::Address& a) = 0;
  virtual catalog::Lineage lineage(std::string_view tenant, const catalog::Address& a,
                                   const catalog::LineageOptions& o) = 0;
  virtual catalog::Policy fork(std::string_view tenant, const catalog::Address& from,
                               std::string_view name, std::string_view actor) = 0;
  virtual catalog::Policy rollback(std::string_view tenant, const catalog::Address& to,
                                   std::string_view actor) = 0;
  // An ephemeral revision made durable (remote: op catalog_promote).
  virtual catalog::Revision promote(std::string_view tenant, const catalog::Address& a,
                                    std::string_view actor) = 0;
  virtual catalog::Policy tag(std::string_view tenant, std::string_view policy,
                              std::string_view tag, std::string_view actor) = 0;
  virtual catalog::Policy untag(std::string_view tenant, std::string_view policy,
                                std::string_view tag, std::string_view actor) = 0;
  virtual void remove(std::string_view tenant, std::string_view policy,
                      std::string_view actor) = 0;
  // The tenant requests act as ("local", the --tenant option, or the token's tenant).
  virtual std::string tenant() const = 0;
};

std::unique_ptr<CatalogAccess> local_catalog_access(catalog::Catalog& cat, std::string tenant);
// `client` must outlive the access object.
std::unique_ptr<CatalogAccess> remote_catalog_access(protocol::Client& client);

}  // namespace spindle::cli
