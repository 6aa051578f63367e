#pragma once
// Per-tenant quotas on sampling work in flight, so one tenant cannot take every queued token or
// serving slot from the others (the scheduler's per-tenant round robin shares engine steps, not
// memory):
//   --tenant-max-queued-tokens  prompt + num_samples x max_tokens summed over the tenant's
//                               admitted, unfinished sample / sample_stream / compute_logprobs
//                               (prompt only) / reward_test jobs;
//   --tenant-max-serving-slots  distinct adapters (residency keys) those jobs name; a job on
//                               the bare base names none. Each such adapter holds a serving slot
//                               while its jobs run, so this bounds the slots a tenant can pin
//                               (it never counts an idle slot the LRU may evict).
// The session quota (--tenant-max-sessions) lives in SessionTable.
//
// A request takes a Charge before it reaches the scheduler and gives it back when its reply is
// built (release()), or when the job is dropped (the last copy of the Charge is destroyed).
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "spindle/service/service.h"

namespace spindle::service {

class TenantQuotas {
 public:
  // Reads the quotas from `config` at each charge (it is filled before any request arrives and
  // immutable afterwards; 0 = no quota).
  explicit TenantQuotas(const ServiceConfig& config) : config_(config) {}

  class Charge {
   public:
    ~Charge() { release(); }
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;
    void release();  // idempotent

   private:
    friend class TenantQuotas;
    Charge(TenantQuotas& q, std::string tenant, int64_t tokens, std::string adapter)
        : q_(q), tenant_(std::move(tenant)), tokens_(tokens), adapter_(std::move(adapter)) {}
    TenantQuotas& q_;
    std::string tenant_;
    int64_t tokens_;
    std::string adapter_;  // "" = the bare base: no slot
    std::atomic<bool> released_{false};
  };
  using ChargePtr = std::shared_ptr<Charge>;

  // Takes `tokens` and a place for `adapter` ("" = none) from `tenant`'s quotas; throws
  // resource naming the tenant, the quota and its flag when either would be exceeded (nothing
  // is taken then).
  ChargePtr charge(const std::string& tenant, int64_t tokens, const std::string& adapter);

 private:
  struct Usage {
    int64_t tokens = 0;
    std::map<std::string, int64_t> adapters;  // residency key -> jobs in flight on it
  };
  void give_back(const Charge& c);

  const ServiceConfig& config_;
  std::mutex mutex_;
  std::unordered_map<std::string, Usage> usage_;  // guarded by mutex_; tenants with work only
};

}  // namespace spindle::service
