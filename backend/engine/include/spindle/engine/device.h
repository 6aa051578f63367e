#pragma once
// Devices and the two device-resident stores of the execution-backend interface (backend.h):
// the adapter slot pool and the paged KV cache. Kept apart from backend.h so the CPU classes
// that implement them (engine::LoraSlotPool, engine::KvCache) can include it.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "spindle/core/dtype.h"
#include "spindle/engine/kv_blocks.h"

namespace spindle::engine {

struct LoraWeights;

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int32_t index = 0;  // CUDA ordinal; 0 for the CPU
  std::string name() const;  // "cpu", "cuda:1"
  bool operator==(const Device&) const = default;
};

// Device memory in bytes. For the CPU, "device" memory is the process's own heap: free/total
// are the machine's available/total RAM.
struct MemoryReport {
  std::string device_name;  // "cpu (AMD ...)", "NVIDIA H200 (sm_90, 139 GiB)"
  size_t base_bytes = 0;    // the resident base weights
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// A fixed pool of adapter slots in device memory (punica's LoRA slots): sized once by
// max_slots × max_rank per adapted (layer, target), so memory is known up front. Forwards read
// a slot through the SGMV kernels; the base is never touched.
class SlotPool {
 public:
  virtual ~SlotPool() = default;
  virtual Device device() const = 0;
  virtual int32_t max_slots() const = 0;
  virtual int32_t max_rank() const = 0;
  // Validates `adapter` against the base and the pool (LoraWeights::validate, rank <= max_rank,
  // storage for every adapted target; nothing changes on error), then copies it from host
  // memory into `slot`. The slot reads as occupied at once. On CUDA the copy is queued on the
  // pool's own loader stream and load returns before it lands: a forward that uses the slot
  // waits for it on the device, a forward on other slots never does.
  virtual void load(int32_t slot, const LoraWeights& adapter) = 0;
  // Frees the slot (a queued device operation on CUDA). Clearing a slot that a queued or
  // running forward reads is the caller's bug: the residency manager never does.
  virtual void clear(int32_t slot) = 0;
  virtual bool occupied(int32_t slot) const = 0;  // invalid_argument outside [0, max_slots)
  virtual std::optional<int32_t> first_free() const = 0;
  virtual size_t bytes() const = 0;  // device bytes held
  // Waits (on the host) until every queued load and clear has landed; a no-op on the CPU.
  // For timings and tools: the serving path never waits on the host.
  virtual void synchronize() const = 0;
};

// A paged KV cache on the device (vLLM's block layout; KvBlockTable does the bookkeeping):
// sequences, their lengths and shared (forked) blocks. The forward appends the new tokens' K/V.
class KvPool {
 public:
  virtual ~KvPool() = default;
  virtual Device device() const = 0;
  virtual SeqId create() = 0;
  // A new sequence sharing every block of `parent` (same length, same tokens; copy-on-write).
  virtual SeqId fork(SeqId parent) = 0;
  virtual void release(SeqId seq) = 0;
  virtual int64_t length(SeqId seq) const = 0;
  // Blocks that appending n tokens to `seq` would take from the free list.
  virtual int64_t blocks_needed(SeqId seq, int64_t n) const = 0;
  virtual int64_t block_size() const = 0;
  virtual int64_t n_blocks() const = 0;
  virtual int64_t free_blocks() const = 0;
  virtual size_t bytes() const = 0;  // device bytes held
};

}  // namespace spindle::engine
