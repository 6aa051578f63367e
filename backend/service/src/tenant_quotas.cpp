#include "tenant_quotas.h"

#include <algorithm>
#include <cstdint>

#include "spindle/core/error.h"

namespace spindle::service {

TenantQuotas::ChargePtr TenantQuotas::charge(const std::string& tenant, int64_t tokens,
                                             const std::string& adapter) {
  const int64_t max_tokens =
      int64_t(std::min<uint64_t>(config_.tenant_max_queued_tokens, uint64_t(INT64_MAX)));
  const uint32_t max_adapters = config_.tenant_max_serving_slots;
  std::lock_guard lock(mutex_);
  static const Usage kNone;
  const auto found = usage_.find(tenant);
  const Usage& u = found == usage_.end() ? kNone : found->second;
  SPINDLE_CHECK(max_tokens == 0 || tokens <= max_tokens, resource,
                "tenant '{}': this request needs {} sampling tokens (prompt + num_samples x "
                "max_tokens), more than the tenant's quota of {} (--tenant-max-queued-tokens)",
                tenant, tokens, max_tokens);
  SPINDLE_CHECK(max_tokens == 0 || u.tokens + tokens <= max_tokens, resource,
                "tenant '{}': {} sampling tokens already queued, this request's {} would exceed "
                "the tenant's quota of {} (--tenant-max-queued-tokens); retry when its requests "
                "finish",
                tenant, u.tokens, tokens, max_tokens);
  const bool new_adapter = !adapter.empty() && !u.adapters.contains(adapter);
  SPINDLE_CHECK(max_adapters == 0 || !new_adapter || u.adapters.size() < max_adapters, resource,
                "tenant '{}': sampling requests in flight on {} adapter(s), the tenant's quota of "
                "serving slots (--tenant-max-serving-slots {}); retry this adapter when one "
                "finishes",
                tenant, u.adapters.size(), max_adapters);
  Usage& mine = usage_[tenant];
  mine.tokens += tokens;
  if (!adapter.empty()) ++mine.adapters[adapter];
  return ChargePtr(new Charge(*this, tenant, tokens, adapter));
}

void TenantQuotas::give_back(const Charge& c) {
  std::lock_guard lock(mutex_);
  const auto it = usage_.find(c.tenant_);
  if (it == usage_.end()) return;
  Usage& u = it->second;
  u.tokens -= c.tokens_;
  if (!c.adapter_.empty()) {
    const auto a = u.adapters.find(c.adapter_);
    if (a != u.adapters.end() && --a->second == 0) u.adapters.erase(a);
  }
  if (u.tokens <= 0 && u.adapters.empty()) usage_.erase(it);
}

void TenantQuotas::Charge::release() {
  if (!released_.exchange(true)) q_.give_back(*this);
}

}  // namespace spindle::service
