// catalog_commit_loop DATA_DIR FIRST_SEED: commits revisions in a loop until killed.
// After each commit returns (acknowledged: durable), writes "<revision id> <seed>\n" to
// stdout in one write(2) (atomic on a pipe), so the parent knows exactly which revisions
// were acknowledged. Every 7th step rolls the head back one revision, every 11th toggles a
// tag: the kill lands inside those transactions too.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "commit_loop_common.h"
#include "spindle/core/error.h"

namespace {

using namespace spindle::catalog;
using namespace spindle::catalog::durability;

void say(const std::string& line) {
  const std::string out = line + "\n";
  if (::write(1, out.data(), out.size()) != ssize_t(out.size())) std::_Exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: catalog_commit_loop DATA_DIR FIRST_SEED\n");
    return 2;
  }
  try {
    Catalog cat(argv[1]);
    cat.register_base({.id = kBase, .arch = "qwen3", .path = "", .checksum = "loop"}, "loop");
    try {
      cat.get_policy(kTenant, kPolicy);
    } catch (const spindle::Error& e) {
      if (e.code() != spindle::ErrorCode::not_found) throw;
      cat.create_policy(kTenant, loop_spec(), "loop");
    }
    for (uint64_t seed = std::strtoull(argv[2], nullptr, 10);; ++seed) {
      const Revision r = cat.commit_revision(
          kTenant, kPolicy, loop_adapter(seed),
          {.actor = "loop", .metrics_json = "{\"seed\":" + std::to_string(seed) + "}"});
      say(r.id + " " + std::to_string(seed));
      if (seed % 7 == 0 && r.parent) {
        cat.rollback(kTenant, {kTenant, kPolicy, *r.parent}, "loop");
      }
      if (seed % 11 == 0) {
        const Policy p = cat.get_policy(kTenant, kPolicy);
        if (p.tags.empty()) {
          cat.tag(kTenant, kPolicy, "flip", "loop");
        } else {
          cat.untag(kTenant, kPolicy, "flip", "loop");
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "catalog_commit_loop: %s\n", e.what());
    return 1;
  }
}
