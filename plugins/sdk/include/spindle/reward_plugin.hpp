// Header-only C++ helper for writing a Spindle reward plugin against the C ABI in reward.h.
//
//   class MyReward {
//    public:
//     explicit MyReward(const std::string& config_json);      // throw on a bad config
//     spindle::reward_sdk::Score score(const spindle::reward_sdk::Item& item);
//   };
//   SPINDLE_REWARD_PLUGIN(MyReward, "my_reward", "one-line description", R"({"type":"object"})",
//                         "1.0.0")
//
// The last argument, the plugin's version (spindle_reward_plugin::version), is optional ("").
// The macro defines the exported spindle_reward_plugin_get(). Every exception thrown by the
// constructor or score() is caught at the boundary and its what() returned as the error string
// (create(): SPINDLE_REWARD_INVALID_CONFIG; score(): SPINDLE_REWARD_INVALID_ITEM for
// spindle::reward_sdk::ItemError, SPINDLE_REWARD_INTERNAL otherwise). Non-finite scores are
// the host's to reject; a plugin should not produce them.
#pragma once

#include <spindle/reward.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::reward_sdk {

/// A view of one spindle_reward_item; valid during one score() call.
struct Item {
  std::string_view prompt;
  std::string_view completion;
  std::span<const int32_t> completion_tokens;
  std::string_view reference;
  std::string_view metadata_json;
};

/// One item's result: the score and an optional human-readable info string.
struct Score {
  double score = 0.0;
  std::string info;
};

/// Throw from score() for an item the plugin cannot score (bad metadata, ...).
struct ItemError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {

inline void write_error(char* err, size_t err_size, const char* message) {
  if (err == nullptr || err_size == 0) return;
  std::snprintf(err, err_size, "%s", message);
}

inline std::string_view view(const char* p, size_t n) {
  return p == nullptr ? std::string_view() : std::string_view(p, n);
}

template <class Plugin>
struct Context {
  std::unique_ptr<Plugin> plugin;
  std::vector<std::string> infos;  // owned until the next score_batch(), as reward.h requires
};

template <class Plugin>
spindle_reward_status create(const char* config_json, spindle_reward_ctx** ctx_out, char* err,
                             size_t err_size) {
  if (ctx_out == nullptr) return SPINDLE_REWARD_INTERNAL;
  *ctx_out = nullptr;
  try {
    auto ctx = std::make_unique<Context<Plugin>>();
    ctx->plugin = std::make_unique<Plugin>(std::string(config_json ? config_json : "{}"));
    *ctx_out = reinterpret_cast<spindle_reward_ctx*>(ctx.release());
    return SPINDLE_REWARD_OK;
  } catch (const std::exception& e) {
    write_error(err, err_size, e.what());
  } catch (...) {
    write_error(err, err_size, "unknown exception in create()");
  }
  return SPINDLE_REWARD_INVALID_CONFIG;
}

template <class Plugin>
spindle_reward_status score_batch(spindle_reward_ctx* raw, const spindle_reward_item* items,
                                  size_t n, double* scores_out, const char** infos_out, char* err,
                                  size_t err_size) {
  auto* ctx = reinterpret_cast<Context<Plugin>*>(raw);
  if (ctx == nullptr || (n > 0 && (items == nullptr || scores_out == nullptr))) {
    write_error(err, err_size, "score_batch: null context or buffers");
    return SPINDLE_REWARD_INTERNAL;
  }
  size_t i = 0;
  try {
    ctx->infos.assign(n, std::string());
    for (; i < n; ++i) {
      const spindle_reward_item& it = items[i];
      Item item{view(it.prompt, it.prompt_len), view(it.completion, it.completion_len),
                std::span<const int32_t>(it.completion_tokens,
                                         it.completion_tokens ? it.completion_tokens_len : 0),
                view(it.reference, it.reference_len),
                view(it.metadata_json, it.metadata_json_len)};
      Score s = ctx->plugin->score(item);
      scores_out[i] = s.score;
      ctx->infos[i] = std::move(s.info);
    }
    if (infos_out != nullptr) {
      for (size_t k = 0; k < n; ++k) infos_out[k] = ctx->infos[k].c_str();
    }
    return SPINDLE_REWARD_OK;
  } catch (const ItemError& e) {
    write_error(err, err_size, ("item " + std::to_string(i) + ": " + e.what()).c_str());
    return SPINDLE_REWARD_INVALID_ITEM;
  } catch (const std::exception& e) {
    write_error(err, err_size, ("item " + std::to_string(i) + ": " + e.what()).c_str());
  } catch (...) {
    write_error(err, err_size, "unknown exception in score_batch()");
  }
  return SPINDLE_REWARD_INTERNAL;
}

template <class Plugin>
void destroy(spindle_reward_ctx* raw) {
  delete reinterpret_cast<Context<Plugin>*>(raw);
}

// The optional version argument of SPINDLE_REWARD_PLUGIN.
constexpr const char* version_or_empty() { return ""; }
constexpr const char* version_or_empty(const char* version) { return version; }

}  // namespace detail
}  // namespace spindle::reward_sdk

/// Defines the exported entry point for plugin class `Class` (see the top of this file); an
/// optional fifth argument is the plugin's version string.
#define SPINDLE_REWARD_PLUGIN(Class, name_str, description_str, schema_str, ...)          \
  extern "C" SPINDLE_REWARD_EXPORT const spindle_reward_plugin* spindle_reward_plugin_get( \
      void) {                                                                              \
    static const spindle_reward_plugin table = {                                           \
        SPINDLE_REWARD_ABI_VERSION,                                                        \
        static_cast<uint32_t>(sizeof(spindle_reward_plugin)),                              \
        name_str,                                                                          \
        description_str,                                                                   \
        schema_str,                                                                        \
        &::spindle::reward_sdk::detail::create<Class>,                                     \
        &::spindle::reward_sdk::detail::score_batch<Class>,                                \
        &::spindle::reward_sdk::detail::destroy<Class>,                                    \
        ::spindle::reward_sdk::detail::version_or_empty(__VA_ARGS__),                      \
    };                                                                                     \
    return &table;                                                                         \
  }
