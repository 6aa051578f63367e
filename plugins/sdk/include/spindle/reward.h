/* Spindle reward plugin ABI (plain C, versioned; STYLE.md 7).
 *
 * A reward plugin is a shared object named `spindle_reward_<name>.so` (a `lib` prefix is also
 * accepted) that exports exactly one function, spindle_reward_plugin_get(), returning a pointer
 * to a static spindle_reward_plugin table. `spindle-reward-host` loads it with
 * dlopen(RTLD_NOW | RTLD_LOCAL), reads `abi_version` first (it is the first member in every ABI
 * version) and refuses the file, naming both versions, when it differs from
 * SPINDLE_REWARD_ABI_VERSION. `name` must equal the <name> part of the file name.
 *
 * Threading: the host calls a plugin from one thread only. A context is used by one call at a
 * time. Plugins must not call exit(), install signal handlers or write to stdout.
 *
 * Errors: status codes only (STYLE.md 8). On failure a function writes a NUL-terminated,
 * human-readable message into `err` (at most `err_size` bytes including the NUL) that names
 * the offending config field or item, e.g. "keywords: config.present must be an array of
 * strings". C++ exceptions must never cross this boundary (reward_plugin.hpp does this for
 * you).
 */
#ifndef SPINDLE_REWARD_H_
#define SPINDLE_REWARD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI this header describes; bump on any incompatible change to the structs or signatures
 *  below. Members appended at the END of spindle_reward_plugin are compatible: the table carries
 *  its struct_size, and the host reads an appended member only when struct_size covers it (an
 *  older plugin's table is shorter and gets the member's documented default). */
#define SPINDLE_REWARD_ABI_VERSION 1u
/** The exported entry symbol, for dlsym(). */
#define SPINDLE_REWARD_ENTRY_SYMBOL "spindle_reward_plugin_get"

#if defined(_WIN32)
#define SPINDLE_REWARD_EXPORT __declspec(dllexport)
#else
#define SPINDLE_REWARD_EXPORT __attribute__((visibility("default")))
#endif

/** Status codes returned across the ABI. */
typedef enum spindle_reward_status {
  SPINDLE_REWARD_OK = 0,
  SPINDLE_REWARD_INVALID_CONFIG = 1, /**< create(): the config does not validate */
  SPINDLE_REWARD_INVALID_ITEM = 2,   /**< score_batch(): an item the plugin cannot score */
  SPINDLE_REWARD_INTERNAL = 3,       /**< anything else (a bug in the plugin, out of memory) */
} spindle_reward_status;

/** One completion to score. Strings are UTF-8, not necessarily NUL-terminated: use the
 *  lengths. All pointers stay valid for the duration of one score_batch() call only. */
typedef struct spindle_reward_item {
  const char* prompt;
  size_t prompt_len;
  const char* completion;
  size_t completion_len;
  const int32_t* completion_tokens; /**< token ids of the completion (may be NULL if n == 0) */
  size_t completion_tokens_len;
  const char* reference; /**< reference answer; "" when the dataset has none */
  size_t reference_len;
  const char* metadata_json; /**< a JSON object: the dataset row's other fields */
  size_t metadata_json_len;
} spindle_reward_item;

/** A plugin's per-config state; opaque to the host. */
typedef struct spindle_reward_ctx spindle_reward_ctx;

/** The table a plugin exports. Member order is part of the ABI. */
typedef struct spindle_reward_plugin {
  uint32_t abi_version; /**< SPINDLE_REWARD_ABI_VERSION the plugin was built against */
  uint32_t struct_size; /**< sizeof(spindle_reward_plugin) the plugin was built with */
  const char* name;     /**< short name: [a-z0-9_]+, equals the file's <name> */
  const char* description;        /**< one line for `spindle reward plugins` */
  const char* config_schema_json; /**< JSON Schema (subset) of the config object */

  /** Parses and validates `config_json` (a NUL-terminated JSON object) and returns a new
   *  context in `*ctx_out`. On failure returns non-OK, leaves `*ctx_out` NULL, fills `err`. */
  spindle_reward_status (*create)(const char* config_json, spindle_reward_ctx** ctx_out,
                                  char* err, size_t err_size);

  /** Scores `n` items. Writes one finite score per item into `scores_out[0..n)` and one
   *  NUL-terminated info string per item into `infos_out[0..n)` (NULL or "" for none). Info
   *  strings are owned by the context and stay valid until the next score_batch() or
   *  destroy() on it. On failure returns non-OK and fills `err`. */
  spindle_reward_status (*score_batch)(spindle_reward_ctx* ctx, const spindle_reward_item* items,
                                       size_t n, double* scores_out, const char** infos_out,
                                       char* err, size_t err_size);

  /** Frees a context from create(); NULL is a no-op. */
  void (*destroy)(spindle_reward_ctx* ctx);

  /* ---- appended members (read only when struct_size covers them) ---- */

  /** The plugin's own version, e.g. "1.0.0" (free form, shown by `spindle reward plugins` and
   *  the Studio); NULL or "" for none. Tables with a struct_size of
   *  SPINDLE_REWARD_PLUGIN_V1_SIZE (built before this member existed) have version "". */
  const char* version;
} spindle_reward_plugin;

/** struct_size of the first ABI-1 table (up to and including `destroy`): the smallest table a
 *  host accepts. */
#define SPINDLE_REWARD_PLUGIN_V1_SIZE \
  (offsetof(spindle_reward_plugin, destroy) + sizeof(void (*)(spindle_reward_ctx*)))

/** The one exported function; returns a pointer to a table with static storage duration. */
typedef const spindle_reward_plugin* (*spindle_reward_plugin_get_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* SPINDLE_REWARD_H_ */
