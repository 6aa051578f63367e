// Test plugin: allocates and touches memory without bound while scoring, never freeing it.
// config {"mode": "new"} (default) allocates with operator new, whose failure the SDK would
// otherwise turn into an ordinary error; {"mode": "malloc"} uses malloc without a NULL check, as
// careless C does, so the limit shows up as a fault. Pointers are kept in a static table, so
// nothing else allocates on the way.
#include <spindle/reward_plugin.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>

namespace {

constexpr size_t kChunk = size_t(8) << 20;
char* g_kept[1 << 16];  // 512 GiB of chunks: more than any limit

struct Leak {
  explicit Leak(const std::string& config) {
    const nlohmann::json j = nlohmann::json::parse(config);
    use_malloc_ = j.value("mode", "new") == "malloc";
  }
  spindle::reward_sdk::Score score(const spindle::reward_sdk::Item&) {
    for (char*& slot : g_kept) {
      slot = use_malloc_ ? static_cast<char*>(std::malloc(kChunk)) : new char[kChunk];
      std::memset(slot, 1, kChunk);  // touched: resident, not only reserved
    }
    return {0.0, "unreachable"};
  }
  bool use_malloc_ = false;
};

}  // namespace

SPINDLE_REWARD_PLUGIN(Leak, "leak", "test: allocates memory without bound while scoring",
                      R"({"type": "object", "properties": {"mode": {"enum": ["new", "malloc"]}},
                          "additionalProperties": false})")
