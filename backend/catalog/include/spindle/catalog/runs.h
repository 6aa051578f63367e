#pragma once
// Run records: a GRPO run's config, status, the policies it trains and its metrics timeline
// (schema version 4). Tenant-scoped like policies: a run of another tenant is not_found with
// the same message as a missing one.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spindle::catalog {

// queued | running | stopped | failed | done
bool is_run_status(const std::string& status);

struct RunRecord {
  std::string id;  // 16 hex digits, random
  std::string tenant;
  std::string config_json;
  std::string status = "queued";
  std::string error;  // failed: what happened; "" otherwise
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  int64_t step = 0;   // last finished step
  int64_t steps = 0;  // the config's step count
  std::vector<std::string> policies;  // addresses (spindle://tenant/name)
};

// Fields to change; absent ones are kept. updated_ms is always set to now.
struct RunUpdate {
  std::optional<std::string> status;
  std::optional<std::string> error;
  std::optional<int64_t> step;
  std::optional<std::vector<std::string>> policies;
};

// One policy's metrics at one step. (run, step, policy) is unique: a step recorded again
// (a resumed run re-evaluating its start) replaces the earlier row.
struct RunMetric {
  int64_t step = 0;
  std::string policy;
  std::string metrics_json;  // a JSON object
  int64_t created_ms = 0;    // set by the catalog
};

struct RunQuery {
  int limit = 50;
  std::string cursor;  // RunPage::next_cursor of the previous page; "" = first page
};

struct RunPage {
  std::vector<RunRecord> items;  // newest first
  std::string next_cursor;       // "" when this is the last page
};

}  // namespace spindle::catalog
