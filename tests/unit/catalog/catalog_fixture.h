#pragma once
// Shared pieces of the catalog tests: a temp data dir, a fake clock, a tiny base, adapters.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "../model/model_fixtures.h"
#include "spindle/catalog/catalog.h"
#include "spindle/core/error.h"

namespace spindle::catalog::testing {

using engine::LoraTarget;

inline std::filesystem::path fresh_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "x";
  auto p = std::filesystem::temp_directory_path() /
           fmt::format("spindle_catalog_{}_{}_{}_{}", tag, name, ::getpid(), counter++);
  std::filesystem::remove_all(p);
  return p;
}

// The message of the spindle::Error `f` throws (and its code), or "<no error>".
struct Caught {
  std::string message = "<no error>";
  std::optional<ErrorCode> code;
};
inline Caught catch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.what(), e.code()};
  }
  return {};
}

inline const engine::ModelConfig& tiny() {
  static const engine::ModelConfig c = spindle::testing::tiny_config(engine::Arch::qwen3);
  return c;
}

inline engine::LoraWeights adapter(uint64_t seed, int64_t rank = 4, float alpha = 8.0f) {
  const LoraTarget targets[] = {LoraTarget::q, LoraTarget::v};
  return engine::LoraWeights::random(tiny(), rank, alpha, targets, seed, 0.1f, 0.1f);
}

// Same hyper-parameters and, bit for bit, the same tensors under the same names (dense modules
// and routed experts alike).
inline bool same_weights(const engine::LoraWeights& a, const engine::LoraWeights& b) {
  if (a.rank != b.rank || a.alpha != b.alpha || a.use_rslora != b.use_rslora ||
      a.modules.size() != b.modules.size()) {
    return false;
  }
  std::vector<std::pair<std::string, const Tensor*>> x, y;
  engine::for_each_lora_tensor(a, [&](const std::string& n, const Tensor& t) {
    x.push_back({n, &t});
  });
  engine::for_each_lora_tensor(b, [&](const std::string& n, const Tensor& t) {
    y.push_back({n, &t});
  });
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].first != y[i].first || x[i].second->shape() != y[i].second->shape()) return false;
    if (std::memcmp(x[i].second->data(), y[i].second->data(), x[i].second->bytes()) != 0) {
      return false;
    }
  }
  return true;
}

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("db");
    cat_ = open();
    cat_->register_base({.id = "tiny", .arch = "qwen3", .path = "", .checksum = "c0ffee"}, "test");
  }
  void TearDown() override {
    cat_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<Catalog> open() {
    CatalogOptions o;
    o.clock_ms = [this] { return clock_ms_; };
    return std::make_unique<Catalog>(dir_, o);
  }

  static PolicySpec spec(const std::string& name, std::vector<std::string> tags = {},
                         const std::string& description = "") {
    PolicySpec s;
    s.name = name;
    s.base_id = "tiny";
    s.lora = {
        .rank = 4, .alpha = 8.0f, .targets = {LoraTarget::q, LoraTarget::v}, .use_rslora = false};
    s.description = description;
    s.tags = std::move(tags);
    return s;
  }

  Revision commit(const std::string& tenant, const std::string& policy, uint64_t seed) {
    clock_ms_ += 1000;
    return cat_->commit_revision(tenant, policy, adapter(seed), {.actor = "test"});
  }

  Address addr(const std::string& tenant, const std::string& policy,
               const std::string& revision = "") {
    return {tenant, policy, revision};
  }

  std::filesystem::path dir_;
  int64_t clock_ms_ = 1'700'000'000'000;
  std::unique_ptr<Catalog> cat_;
};

}  // namespace spindle::catalog::testing
