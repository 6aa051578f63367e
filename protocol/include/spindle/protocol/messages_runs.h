#pragma once
/// \file messages_runs.h
/// GRPO run and reward-test messages. Part of the wire messages: include messages.h, which includes this file
/// and whose header comment states the framing, the encodings and the compatibility rule.

#include "spindle/protocol/messages.h"

namespace spindle::protocol {

// ---- GRPO runs -----------------------------------------------------------------------------

/// A run record (catalog schema v4). status: queued | running | stopped | failed | done.
struct RunInfo {
  bool operator==(const RunInfo&) const = default;
  std::string id;
  std::string tenant;
  std::string status;
  std::string error;  // failed / interrupted: what happened
  int64_t step = 0;   // last finished step
  int64_t steps = 0;
  std::vector<std::string> policies;  // addresses
  std::string config_json;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(id), CEREAL_NVP(tenant), CEREAL_NVP(status), CEREAL_NVP(error),
       CEREAL_NVP(step), CEREAL_NVP(steps), CEREAL_NVP(policies), CEREAL_NVP(config_json),
       CEREAL_NVP(created_ms), CEREAL_NVP(updated_ms));
  }
};
/// One policy's metrics at one step (a JSON object: reward_mean, loss, kl, eval_accuracy, ...).
struct RunMetricInfo {
  bool operator==(const RunMetricInfo&) const = default;
  int64_t step = 0;
  std::string policy;
  std::string metrics_json;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(step), CEREAL_NVP(policy), CEREAL_NVP(metrics_json));
  }
};

/// op "run_start": a GRPO run config (spindle grpo's JSON; its "tenant" is replaced by the
/// caller's) -> the new run, started on the server.
struct RunStartRequest {
  bool operator==(const RunStartRequest&) const = default;
  std::string config_json;
  /// Continue policies that already have revisions from their heads (e.g. a policy made by
  /// catalog_fork of any revision: the fork of a run). false: such a policy is refused.
  bool resume = false;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(config_json), CEREAL_NVP(resume)); }
};
struct RunStartReply {
  bool operator==(const RunStartReply&) const = default;
  std::string run_id;
  std::vector<std::string> policies;  // addresses
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(run_id), CEREAL_NVP(policies)); }
};
/// op "run_list": the caller's runs, newest first.
struct RunListRequest {
  bool operator==(const RunListRequest&) const = default;
  uint32_t limit = 50;  // 1..1000
  std::string cursor;   // next_cursor of the previous page; "" = first page
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(limit), CEREAL_NVP(cursor)); }
};
struct RunListReply {
  bool operator==(const RunListReply&) const = default;
  std::vector<RunInfo> runs;
  std::string next_cursor;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(runs), CEREAL_NVP(next_cursor)); }
};
/// op "run_status": the run and its metrics with step >= metrics_since_step.
struct RunStatusRequest {
  bool operator==(const RunStatusRequest&) const = default;
  std::string run_id;
  int64_t metrics_since_step = 0;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(run_id), CEREAL_NVP(metrics_since_step));
  }
};
/// Reply of run_status, run_stop and run_resume (these two with no metrics), and the body of
/// the "metrics" PUB event (the step's rows).
struct RunStatusReply {
  bool operator==(const RunStatusReply&) const = default;
  RunInfo run;
  std::vector<RunMetricInfo> metrics;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(run), CEREAL_NVP(metrics)); }
};
/// ops "run_stop", "run_resume".
struct RunIdRequest {
  bool operator==(const RunIdRequest&) const = default;
  std::string run_id;
  template <class A> void serialize(A& ar, uint32_t) { ar(CEREAL_NVP(run_id)); }
};

// ---- reward test ---------------------------------------------------------------------------

/// One prompt row of reward_test, what a JSONL data row gives the reward plugins.
struct RewardTestRow {
  bool operator==(const RewardTestRow&) const = default;
  std::string prompt;         // text; the server tokenizes it (with the tokenizer's specials)
  std::string reference;      // reference answer ("" = none)
  std::string metadata_json;  // a JSON object the plugins see as metadata ("" = {})
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(prompt), CEREAL_NVP(reference), CEREAL_NVP(metadata_json));
  }
};

/// op "reward_test": sample num_samples completions of every row from `address`, score them
/// with the reward spec on the server and return the score distribution and every sample.
struct RewardTestRequest {
  bool operator==(const RewardTestRequest&) const = default;
  std::string spec_json;  // reward spec {"terms": [{name, plugin, weight, config}]}
  std::vector<RewardTestRow> rows;
  std::string address;    // policy address or bare base id
  int32_t num_samples = 4;  // per row; rows x num_samples <= max_reward_test_samples
  SamplingParamsMsg sampling_params;
  uint32_t bins = 10;     // histogram bins of every distribution (1..1000)
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(spec_json), CEREAL_NVP(rows), CEREAL_NVP(address), CEREAL_NVP(num_samples),
       CEREAL_NVP(sampling_params), CEREAL_NVP(bins));
  }
};

/// Population statistics of n scores; histogram: `bins` equal-width bins over [min, max]
/// (every value in bin 0 when min == max).
struct DistributionInfo {
  bool operator==(const DistributionInfo&) const = default;
  uint64_t n = 0;
  double mean = 0.0, std = 0.0, min = 0.0, max = 0.0;
  std::vector<uint64_t> histogram;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(n), CEREAL_NVP(mean), CEREAL_NVP(std), CEREAL_NVP(min), CEREAL_NVP(max),
       CEREAL_NVP(histogram));
  }
};

/// One term of the spec and the distribution of its unweighted scores.
struct RewardTermInfo {
  bool operator==(const RewardTermInfo&) const = default;
  std::string name;
  std::string plugin;
  double weight = 1.0;
  DistributionInfo scores;
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(name), CEREAL_NVP(plugin), CEREAL_NVP(weight), CEREAL_NVP(scores));
  }
};

/// One sampled completion and its scores (term order = the spec's).
struct RewardSampleInfo {
  bool operator==(const RewardSampleInfo&) const = default;
  uint32_t row = 0;             // index into the request's rows
  TensorRef tokens;             // int32 [m], what the plugins saw as completion_tokens
  std::string text;             // the completion as scored
  std::string stop_reason;      // "stop" | "length"
  std::vector<double> scores;   // unweighted, per term
  std::vector<std::string> infos;  // plugin-provided info per term ("" = none)
  double total = 0.0;           // sum of weight x score
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(row), CEREAL_NVP(tokens), CEREAL_NVP(text), CEREAL_NVP(stop_reason),
       CEREAL_NVP(scores), CEREAL_NVP(infos), CEREAL_NVP(total));
  }
};

struct RewardTestReply {
  bool operator==(const RewardTestReply&) const = default;
  std::string revision_id;  // what was sampled ("" = base)
  std::vector<RewardTermInfo> terms;
  DistributionInfo total;
  std::vector<RewardSampleInfo> samples;  // row-major: row 0's num_samples first
  template <class A> void serialize(A& ar, uint32_t) {
    ar(CEREAL_NVP(revision_id), CEREAL_NVP(terms), CEREAL_NVP(total), CEREAL_NVP(samples));
  }
};

}  // namespace spindle::protocol

CEREAL_CLASS_VERSION(spindle::protocol::RunInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RunMetricInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RunStartRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RunStartReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RunListRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RunListReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RunStatusRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RunStatusReply, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RunIdRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RewardTestRow, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RewardTestRequest, 1);
CEREAL_CLASS_VERSION(spindle::protocol::DistributionInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RewardTermInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RewardSampleInfo, 1);
CEREAL_CLASS_VERSION(spindle::protocol::RewardTestReply, 1);
