// Keyset-paginated listing with filters, and full-text search. Never OFFSET: a page starts
// strictly after the previous page's last key, so it costs O(log n + page) when an index
// serves the filter and stays correct under concurrent inserts and deletes.
//   sort name:    key = name (unique among a tenant's live policies)
//   sort updated: key = (updated_ms, id) descending; id breaks ties

#include <cctype>
#include <charconv>
#include <variant>

#include "catalog_impl.h"
#include "spindle/adapters/sha256.h"
#include "spindle/core/error.h"

namespace spindle::catalog {
namespace {

using Value = std::variant<int64_t, std::string>;

struct Cursor {
  std::string name;        // sort name
  int64_t updated_ms = 0;  // sort updated
  int64_t id = 0;
};

std::string encode_cursor(PolicySort sort, const Policy& last, int64_t id) {
  if (sort == PolicySort::name) {
    return "n." +
           adapters::to_hex(reinterpret_cast<const uint8_t*>(last.name.data()), last.name.size());
  }
  return fmt::format("u.{}.{}", last.updated_ms, id);
}

Cursor decode_cursor(PolicySort sort, const std::string& text) {
  auto bad = [&] {
    SPINDLE_THROW(invalid_argument,
                  "list cursor '{}' is malformed or was made for another sort order", text);
  };
  Cursor c;
  if (sort == PolicySort::name) {
    if (!text.starts_with("n.") || text.size() % 2 != 0 || text.size() > 2 + 2 * kMaxNameChars)
      bad();
    for (size_t i = 2; i < text.size(); i += 2) {
      unsigned v = 0;
      const auto r = std::from_chars(text.data() + i, text.data() + i + 2, v, 16);
      if (r.ec != std::errc() || r.ptr != text.data() + i + 2) bad();
      c.name.push_back(char(v));
    }
    return c;
  }
  if (!text.starts_with("u.")) bad();
  const char* p = text.data() + 2;
  const char* end = text.data() + text.size();
  auto r1 = std::from_chars(p, end, c.updated_ms);
  if (r1.ec != std::errc() || r1.ptr == end || *r1.ptr != '.') bad();
  auto r2 = std::from_chars(r1.ptr + 1, end, c.id);
  if (r2.ec != std::errc() || r2.ptr != end) bad();
  return c;
}

// FTS5 query: the caller's tenant token AND every word (as a quoted prefix phrase) in
// name/description/tags. Quoting makes any user text a literal, never FTS5 syntax.
std::string fts_query(int64_t tenant_id, std::string_view text) {
  std::string terms;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(uint8_t(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(uint8_t(text[j]))) ++j;
    const std::string_view word = text.substr(i, j - i);
    i = j;
    bool has_token_char = false;
    for (char c : word)
      has_token_char = has_token_char || std::isalnum(uint8_t(c)) || uint8_t(c) >= 0x80;
    if (!has_token_char) continue;
    std::string quoted = "\"";
    for (char c : word) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    terms += (terms.empty() ? "" : " ") + quoted + "\"*";
  }
  SPINDLE_CHECK(!terms.empty(), invalid_argument, "search text '{}' has no words to search for",
                text);
  return fmt::format("tenant : t{} AND {{name description tags}} : ({})", tenant_id, terms);
}

}  // namespace

PolicyPage Catalog::list(std::string_view tenant, const ListQuery& query) {
  check_name("tenant", tenant);
  SPINDLE_CHECK(query.limit >= 1 && query.limit <= 1000, invalid_argument,
                "list limit must be in 1..1000, got {}", query.limit);
  if (query.base_id) check_base_id(*query.base_id);
  if (query.tag) check_tag(*query.tag);
  SPINDLE_CHECK(query.name_prefix.size() <= kMaxNameChars, invalid_argument,
                "name prefix is longer than {} characters", kMaxNameChars);
  PolicyPage page;
  const auto tid = impl_->find_tenant(tenant);
  if (!tid) return page;

  const bool by_name = query.sort == PolicySort::name;
  // With a tag and name order, walk the tag index (which carries the name) instead.
  const bool tag_driven = query.tag && by_name;
  const std::string name_col = tag_driven ? "g2.name" : "p.name";
  std::string sql = kPolicyColumnsSql;
  std::vector<Value> binds;
  auto bind = [&](Value v) {
    binds.push_back(std::move(v));
    return fmt::format("?{}", binds.size());
  };
  if (tag_driven) {
    sql +=
        "FROM policy_tags g2 JOIN policies p ON p.id = g2.policy_id "
        "JOIN tenants t ON t.id = p.tenant_id WHERE g2.tenant_id = " +
        bind(*tid) + " AND g2.tag = " + bind(*query.tag) + " AND p.deleted_ms IS NULL";
  } else {
    sql +=
        "FROM policies p JOIN tenants t ON t.id = p.tenant_id WHERE p.tenant_id = " + bind(*tid) +
        " AND p.deleted_ms IS NULL";
    if (query.tag) {
      sql += " AND EXISTS (SELECT 1 FROM policy_tags g3 WHERE g3.policy_id = p.id AND g3.tag = " +
             bind(*query.tag) + ")";
    }
  }
  if (query.base_id) sql += " AND p.base_id = " + bind(*query.base_id);
  if (query.created_from_ms) sql += " AND p.created_ms >= " + bind(*query.created_from_ms);
  if (query.created_before_ms) sql += " AND p.created_ms < " + bind(*query.created_before_ms);

  std::optional<Cursor> cursor;
  if (!query.cursor.empty()) cursor = decode_cursor(query.sort, query.cursor);
  if (!query.name_prefix.empty()) {
    // Names are ASCII [A-Za-z0-9._-]: everything with the prefix sorts below prefix + '~'.
    if (!(cursor && by_name && cursor->name >= query.name_prefix)) {
      sql += " AND " + name_col + " >= " + bind(query.name_prefix);
    }
    sql += " AND " + name_col + " < " + bind(query.name_prefix + "~");
  }
  if (by_name) {
    if (cursor) sql += " AND " + name_col + " > " + bind(cursor->name);
    sql += " ORDER BY " + name_col;
  } else {
    if (cursor) {
      sql += " AND (p.updated_ms, p.id) < (" + bind(cursor->updated_ms) + ", " + bind(cursor->id) +
             ")";
    }
    sql += " ORDER BY p.updated_ms DESC, p.id DESC";
  }
  sql += " LIMIT " + bind(int64_t(query.limit + 1));

  auto q = impl_->db.query(sql);
  for (size_t i = 0; i < binds.size(); ++i) {
    std::visit([&](const auto& v) { q.bind(int(i + 1), v); }, binds[i]);
  }
  std::vector<int64_t> ids;
  while (q.step()) {
    PolicyRow row = policy_row(q);
    ids.push_back(row.id);
    page.items.push_back(std::move(row.policy));
  }
  if (page.items.size() > size_t(query.limit)) {
    page.items.pop_back();
    page.next_cursor = encode_cursor(query.sort, page.items.back(), ids[page.items.size() - 1]);
  }
  return page;
}

std::vector<Policy> Catalog::search(std::string_view tenant, std::string_view text, int limit) {
  check_name("tenant", tenant);
  SPINDLE_CHECK(limit >= 1 && limit <= 1000, invalid_argument,
                "search limit must be in 1..1000, got {}", limit);
  SPINDLE_CHECK(text.size() <= 1024, invalid_argument, "search text is longer than 1024 bytes");
  std::vector<Policy> out;
  const auto tid = impl_->find_tenant(tenant);
  if (!tid) {
    fts_query(0, text);  // still reject text with no words, whatever the tenant
    return out;
  }
  // The tenant term scopes the match inside the index (the join re-checks it); spindle_rank
  // is bm25 without that term (fts_rank.h).
  auto q = impl_->db.query(
      std::string(kPolicyColumnsSql) +
      "FROM (SELECT rowid AS pid, spindle_rank(policy_fts) AS score FROM policy_fts "
      "      WHERE policy_fts MATCH ?1 ORDER BY score LIMIT ?2) m "
      "JOIN policies p ON p.id = m.pid JOIN tenants t ON t.id = p.tenant_id "
      "WHERE p.tenant_id = ?3 AND p.deleted_ms IS NULL ORDER BY m.score");
  q.bind(1, fts_query(*tid, text)).bind(2, int64_t(limit)).bind(3, *tid);
  while (q.step()) out.push_back(policy_row(q).policy);
  return out;
}

}  // namespace spindle::catalog
