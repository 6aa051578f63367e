#pragma once
// Pieces the phases of `spindle-bench service` share: its options and a spindled child with a
// client for it. Each phase is a function of the options (bench_service.cpp registers them).

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "spindle/protocol/client.h"
#include "spindled_process.h"

namespace spindle::bench {

// What `spindle-bench service` was asked for (its flags; bench_service.cpp).
struct ServiceBenchOptions {
  std::filesystem::path shared_dir;
  std::filesystem::path spindled;
  std::filesystem::path work_dir;
  bool quick = false;
  int handoff_repeats = 5;
  std::string device = "cpu";  // spindled --device, and the merged baseline's engine
  std::vector<std::string> shapes = {"0.6b"};  // handoff bases: 0.6b, 4b
  // The Zipf serving phase (bench_service_zipf.cpp); the quick defaults are set there.
  int zipf_adapters = 1000;
  int zipf_clients = 256;
  int zipf_slots = 128;
  int zipf_storm = 4000;  // never-requested revisions for the cold-load storm
  double zipf_seconds = 10.0;
};

// A spindled child process (tests/support/spindled_process.h) and a client for it.
struct DaemonProcess {
  DaemonProcess(const std::filesystem::path& binary, const std::filesystem::path& data_dir,
                std::vector<std::string> extra, int ready_timeout_s)
      : process(binary, data_dir, with_log_level(std::move(extra)), ready_timeout_s) {}

  void stop() { process.terminate(); }

  protocol::ClientOptions client_options() const {
    protocol::ClientOptions o;
    o.endpoint = process.endpoints().at(0);
    o.token = process.token();
    o.timeout_ms = 120000;
    o.client_name = "spindle-bench";
    return o;
  }

  static std::vector<std::string> with_log_level(std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--log-level", "warn"});
    return extra;
  }
  testing::SpindledProcess process;
};

// Registers `n` rank-8 policies "<prefix><i>" on `base` (create_training, save_weights, close;
// `threads` clients at once) and returns their revisions' addresses, index i at [i].
std::vector<std::string> register_adapters(const protocol::ClientOptions& options,
                                           const std::string& base, const std::string& prefix,
                                           int n, int threads);

// Phase 3: many distinct adapters, Zipf traffic, cold-load storms (bench_service_zipf.cpp).
void run_zipf_serving(const ServiceBenchOptions& opts);

}  // namespace spindle::bench
