#pragma once
// A worker's engine-side pieces that need the daemon (docs/cluster.md): the load function of its
// residency tiers, which finds a revision blob in its blob cache, then in the shared blob
// directory (--blob-dir), then asks the coordinator (ClusterState::fetch_blob) and keeps what it
// got in the cache after checking it hashes to its name.

#include <memory>

#include "daemon_state.h"

namespace spindle::service {

adapters::LoadFn worker_load_fn(Daemon& d, const engine::ModelConfig& base,
                                std::shared_ptr<const adapters::BlobStore> shared);

}  // namespace spindle::service
