// Test plugin: a table laid out as reward.h had it before `version` was appended (struct_size
// covers up to `destroy`), as a plugin built against that header exports it. Scores 1.
#include <spindle/reward.h>

#include <cstdio>
#include <cstring>

namespace {

struct V1Table {  // spindle_reward_plugin up to and including `destroy`
  uint32_t abi_version;
  uint32_t struct_size;
  const char* name;
  const char* description;
  const char* config_schema_json;
  spindle_reward_status (*create)(const char*, spindle_reward_ctx**, char*, size_t);
  spindle_reward_status (*score_batch)(spindle_reward_ctx*, const spindle_reward_item*, size_t,
                                       double*, const char**, char*, size_t);
  void (*destroy)(spindle_reward_ctx*);
};
static_assert(sizeof(V1Table) == SPINDLE_REWARD_PLUGIN_V1_SIZE);

int g_ctx = 0;

spindle_reward_status create(const char*, spindle_reward_ctx** out, char*, size_t) {
  *out = reinterpret_cast<spindle_reward_ctx*>(&g_ctx);
  return SPINDLE_REWARD_OK;
}
spindle_reward_status score(spindle_reward_ctx*, const spindle_reward_item*, size_t n,
                            double* scores, const char** infos, char*, size_t) {
  for (size_t i = 0; i < n; ++i) {
    scores[i] = 1.0;
    if (infos) infos[i] = "";
  }
  return SPINDLE_REWARD_OK;
}
void destroy(spindle_reward_ctx*) {}

}  // namespace

extern "C" SPINDLE_REWARD_EXPORT const spindle_reward_plugin* spindle_reward_plugin_get(void) {
  static const V1Table table = {SPINDLE_REWARD_ABI_VERSION, sizeof(V1Table), "v1_table",
                                "test: an ABI-1 table without version", R"({"type": "object"})",
                                &create, &score, &destroy};
  return reinterpret_cast<const spindle_reward_plugin*>(&table);
}
