#pragma once
// Data-parallel groups (issue 17): one policy trained on several workers, each with its share
// of every batch, whose gradients are summed before each optim_step (core/all_reduce.h states
// the sum's contract). The ranks meet through a RendezvousStore: on a cluster the coordinator's
// key-value store, reached over each worker's control link (the coordinator hands out the
// group's name and every rank's place, and NCCL's unique id travels through it).
//
//   - Gloo (host memory; ring all-reduce over TCP between the ranks' processes): CPU workers;
//   - NCCL (CUDA device memory): CUDA workers; built only with SPINDLE_WITH_CUDA.
//
// Connecting is lazy: the first sum() of every rank meets the others there (Gloo's full mesh,
// or ncclCommInitRank after rank 0 has published the unique id), so making a group never
// blocks. The gradient traffic is plain TCP (or NCCL's transports), as NCCL's always is: run
// data-parallel groups on a trusted network; the control plane stays CURVE-encrypted.

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "spindle/core/all_reduce.h"

namespace spindle::cluster {

// Where a group's ranks leave and find each other's addresses. Keys are "<group>/<name>".
// Thread-safe.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value, or nullopt when no rank has set it yet.
  virtual std::optional<std::string> get(const std::string& key) = 0;
};

// An in-process store (groups whose ranks are threads of one process, and the coordinator's
// table behind its cluster link).
class MemoryStore final : public RendezvousStore {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key) override;
  // Forgets every key of `group` (the group ended).
  void erase_group(const std::string& group);
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::string> values_;
};

struct GroupOptions {
  std::string group;  // unique name of the group (and of this generation of it)
  int rank = 0;
  int size = 1;
  // Gloo: the host name or address the other ranks reach this rank at ("" = this host's name,
  // as its resolver gives it; on one machine "127.0.0.1").
  std::string host;
  // How long a sum waits for the other ranks (and the rendezvous for their addresses).
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  int cuda_device = -1;  // >= 0: NCCL on this CUDA device; -1: Gloo over host memory
  // Throws invalid_argument naming the field.
  void validate() const;
};

// The group's sum for this rank. NCCL without a CUDA build is unsupported (named).
std::unique_ptr<AllReduce> make_all_reduce(std::shared_ptr<RendezvousStore> store,
                                           GroupOptions options);

// Waits until `key` is in `store` (polling, up to `timeout`); throws Error(io) naming the key,
// the group and `who` when it does not come.
std::string wait_for_key(RendezvousStore& store, const std::string& key,
                         std::chrono::milliseconds timeout, const std::string& who);

}  // namespace spindle::cluster
