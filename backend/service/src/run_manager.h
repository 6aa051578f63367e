#pragma once
// GRPO runs hosted by the daemon (ops run_*; PROTOCOL.md "GRPO runs").
//
// One rl::GrpoRun per running run, driven by a thread of its own that also owns a Catalog
// connection (the run record's step and final status, the metrics timeline). Every step's
// metrics are stored, then published on the PUB socket (topic "metrics") through the reply
// channel, so only the front thread touches the PUB socket.
//
// Record states: queued -> running -> done | stopped | failed; stopped and failed runs may be
// resumed (from each policy's head revision). A daemon that dies under a running run leaves
// it "running"; the next daemon marks it "stopped" at start-up (Catalog::interrupt_running_runs).
//
// Threading: every method is safe from any thread; start/stop are called on the catalog thread.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "spindle/catalog/runs.h"
#include "spindle/protocol/messages.h"
#include "spindle/rl/grpo_run.h"

namespace spindle::service {

struct Daemon;

protocol::RunInfo run_info(const catalog::RunRecord& r);

class RunManager {
 public:
  explicit RunManager(Daemon& d) : d_(d) {}
  ~RunManager() { stop_all(); }
  RunManager(const RunManager&) = delete;
  RunManager& operator=(const RunManager&) = delete;

  // Starts `record` (already marked running in the catalog) with `config` on a new thread.
  // Throws invalid_argument for a config GrpoRun refuses, failed_precondition when the run is
  // still active here (a stop in progress).
  void start(const catalog::RunRecord& record, rl::RunConfig config, bool resume);
  // Asks the run to end after its step in progress (it saves, then becomes "stopped").
  // False when the run is not active here.
  bool stop(const std::string& run_id);
  bool active(const std::string& run_id) const;
  // Stops every run and joins its thread (daemon shutdown; the scheduler must still run).
  void stop_all();

 private:
  struct Active {
    std::unique_ptr<rl::GrpoRun> run;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  void drive(Active& a, catalog::RunRecord record);
  void publish(const catalog::RunRecord& record, std::vector<protocol::RunMetricInfo> metrics);
  void reap_locked();  // joins finished runs' threads; mutex_ held

  Daemon& d_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Active>> runs_;  // guarded by mutex_
};

}  // namespace spindle::service
