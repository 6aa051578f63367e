#pragma once
// A valid, fully populated request and reply of every op (every field off its default, UTF-8
// text, extreme integers), for round trips, validation and the fuzz corpus.

#include <cstdint>
#include <limits>
#include <vector>

#include "spindle/protocol/wire.h"

namespace spindle::protocol::testing {

inline PolicyInfo sample_policy(int i) {
  PolicyInfo p;
  p.address = "spindle://alice/p" + std::to_string(i);
  p.tenant = "alice";
  p.name = "p" + std::to_string(i) + " — ünïcode";
  p.base_id = "stories260K";
  p.rank = 8 + i;
  p.alpha = 16.5f;
  p.targets = {"q_proj", "v_proj"};
  p.head = "ab12";
  p.forked_from = "spindle://bob/q@cd34";
  p.tags = {"rl", "gsm8k"};
  p.description = "line1\nline2 \"quoted\" \\ tab\t";
  p.created_ms = 1700000000000 + i;
  p.updated_ms = 1700000000999 + i;
  p.user_metadata_json = i % 2 ? R"({"owner": "alice ✓"})" : "";
  return p;
}

inline RevisionInfo sample_revision(int i) {
  RevisionInfo r;
  r.id = std::string(64, char('a' + i % 6));
  r.policy = "spindle://alice/p";
  r.parent = i ? std::string(64, 'f') : "";
  r.step = 100 * i + 7;
  r.blob = std::string(64, '0');
  r.bytes = (int64_t(1) << 40) + i;
  r.has_state = i % 2 == 0;
  r.metrics_json = R"({"reward": 0.5})";
  r.created_ms = -5;
  r.expires_ms = i % 2 ? 1700000003600000 + i : 0;
  r.expired = i % 3 == 1;
  return r;
}

inline Request sample_request(Op op, Encoding encoding = Encoding::binary) {
  Request r;
  r.encoding = encoding;
  r.request_id = 0xfedcba9876543210ull;
  r.token = "tok-✓";
  r.op = op;
  Frames& f = r.frames;
  const std::vector<int32_t> tokens = {1, 2, 3, 65535, 0};
  const std::vector<float> floats = {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f};
  switch (op) {
    case Op::handshake: r.body = HandshakeRequest{"test-client ☃"}; break;
    case Op::capabilities:
    case Op::status: r.body = Empty{}; break;
    case Op::create_training:
      r.body = CreateTrainingRequest{"stories260K", "pol", 16, 8.5f, false, true, true,
                                     std::numeric_limits<uint64_t>::max(), "desc",
                                     R"({"run": "exp-7 ✓"})"};
      break;
    case Op::create_training_from_state:
      r.body = CreateTrainingFromStateRequest{"spindle://alice/p@latest", false, true, "p-fork",
                                              R"({"k": "v"})"};
      break;
    case Op::forward:
    case Op::forward_backward: {
      ForwardBackwardRequest b;
      b.session_id = "sess-1";
      b.loss_fn = op == Op::forward ? "cross_entropy" : "ppo";
      b.loss_fn_config = {{"clip_low_threshold", 0.75}, {"clip_high_threshold", 1.5}};
      for (int d = 0; d < 2; ++d) {
        DatumMsg m;
        const std::span<const int32_t> in(tokens.data(), size_t(4 + d));
        const std::span<const float> fl(floats.data(), size_t(4 + d));
        m.model_input = add_tensor(f, in);
        m.loss_fn_inputs.push_back({"target_tokens", add_tensor(f, in)});
        m.loss_fn_inputs.push_back({"weights", add_tensor(f, fl)});
        if (op == Op::forward_backward) {
          m.loss_fn_inputs.push_back({"logprobs", add_tensor(f, fl)});
          m.loss_fn_inputs.push_back({"advantages", add_tensor(f, fl)});
        }
        b.data.push_back(m);
      }
      r.body = b;
      break;
    }
    case Op::optim_step:
      r.body = OptimStepRequest{"sess-1", AdamParamsMsg{3e-4f, 0.8f, 0.99f, 1e-8f, 0.01f, 1.0f}};
      break;
    case Op::save_weights:
    case Op::save_state: r.body = SaveRequest{"sess-1", "step-10", R"({"loss": 1.5})", 3600}; break;
    case Op::load_state: r.body = LoadStateRequest{"sess-1", "spindle://alice/p@ab12", false}; break;
    case Op::close_training: r.body = SessionRequest{"sess-1"}; break;
    case Op::sample: {
      SampleRequest b;
      b.address = "spindle://alice/p@latest";
      b.prompt = add_tensor(f, std::span<const int32_t>(tokens));
      b.num_samples = 4;
      b.sampling_params = {32, 0.7f, 40, 0.9f, 12345, {2, 13}, {"\n\n", "The end"}};
      b.include_prompt_logprobs = true;
      b.topk_prompt_logprobs = 5;
      r.body = b;
      break;
    }
    case Op::compute_logprobs: {
      ComputeLogprobsRequest b;
      b.address = "stories260K";
      b.prompt = add_tensor(f, std::span<const int32_t>(tokens));
      r.body = b;
      break;
    }
    case Op::catalog_list: r.body = CatalogListRequest{"stories260K", "rl", "p", 50, "cursor=="}; break;
    case Op::catalog_search: r.body = CatalogSearchRequest{"gsm8k reward", 7}; break;
    case Op::catalog_show:
    case Op::catalog_rollback:
    case Op::catalog_delete:
    case Op::export_peft: r.body = AddressRequest{"spindle://alice/p@ab12"}; break;
    case Op::catalog_lineage: r.body = LineageRequest{"spindle://alice/p", 3, 0}; break;
    case Op::catalog_fork: r.body = ForkRequest{"spindle://alice/p@ab12", "fork"}; break;
    case Op::catalog_tag: r.body = TagRequest{"spindle://alice/p", {"a", "b"}, {"c"}}; break;
    case Op::import_peft: {
      ImportPeftRequest b;
      b.name = "imported";
      b.base_id = "";
      b.adapter_config_json = R"({"r": 8, "lora_alpha": 16})";
      b.adapter_model = add_bytes(f, std::string("\x00\x01\x02safetensors\xff", 15));
      b.description = "from PEFT";
      r.body = b;
      break;
    }
    case Op::tokenize: r.body = TokenizeRequest{"stories260K", "Once upon a time ✨", true}; break;
    case Op::run_start: r.body = RunStartRequest{R"({"steps": 3, "policies": [{"name": "p"}]})", true}; break;
    case Op::run_list: r.body = RunListRequest{20, "17"}; break;
    case Op::run_status: r.body = RunStatusRequest{"00ab12cd34ef5678", 2}; break;
    case Op::run_stop:
    case Op::run_resume: r.body = RunIdRequest{"00ab12cd34ef5678"}; break;
    case Op::reward_test: {
      RewardTestRequest b;
      b.spec_json = R"({"terms": [{"name": "cat", "plugin": "keywords", "weight": 1.5, "config": {"present": ["cat"]}}]})";
      b.rows = {{"Once upon a time ✨", "", R"({"topic": "cats"})"},
                {"Question: 2+3=", "#### 5", ""}};
      b.address = "spindle://alice/p@latest";
      b.num_samples = 3;
      b.sampling_params = {24, 0.75f, 5, 0.9f, std::numeric_limits<uint64_t>::max(), {2}, {"\n\n"}};
      b.bins = 7;
      r.body = b;
      break;
    }
    case Op::reward_plugins:
    case Op::plugin_rescan: r.body = Empty{}; break;
    case Op::datasets: r.body = DatasetsRequest{20}; break;
    case Op::sample_stream: {
      SampleRequest b;
      b.address = "spindle://alice/p@latest";
      b.prompt = add_tensor(f, std::span<const int32_t>(tokens));
      b.num_samples = 2;
      b.sampling_params = {16, 0.5f, 3, 0.95f, 77, {2, 3}, {"\n", "The End ✓"}};
      r.body = b;
      break;
    }
    case Op::subscribe: r.body = SubscribeRequest{{"metrics", "residency"}}; break;
    case Op::unsubscribe: r.body = UnsubscribeRequest{std::numeric_limits<uint64_t>::max()}; break;
    case Op::detokenize:
      r.body = DetokenizeRequest{"Qwen/Qwen3-0.6B", add_tensor(f, std::span<const int32_t>(tokens)), true};
      break;
    case Op::tokenizer_info: r.body = TokenizerInfoRequest{"Qwen/Qwen3-0.6B"}; break;
    case Op::heartbeat: r.body = HeartbeatRequest{{"s-1", "s-2"}}; break;
    case Op::catalog_promote: r.body = AddressRequest{"spindle://alice/p@ab12"}; break;
    case Op::cluster_status: r.body = Empty{}; break;
  }
  return r;
}

inline Reply sample_reply(Op op, Encoding encoding = Encoding::binary) {
  Reply r;
  r.encoding = encoding;
  r.request_id = 42;
  r.op = op;
  Frames& f = r.frames;
  const std::vector<int32_t> tokens = {5, 6, 7};
  const std::vector<float> lps = {-0.5f, -1.5f, -2.25f};
  TrainingSessionReply session{"sess-1", "spindle://alice/p", "stories260K", 16, 32.0f, 12,
                               60000, R"({"run": 7})", std::string(64, 'c')};
  PolicyReply policy{sample_policy(1), sample_revision(1), {sample_revision(2), sample_revision(3)}};
  switch (op) {
    case Op::handshake: r.body = HandshakeReply{1, "0.1.0", "alice"}; break;
    case Op::capabilities: {
      CapabilitiesReply c;
      BaseInfo b{"stories260K", "llama", 5, 64, 512, 512, 1, 2};
      c.bases = {b, b};
      c.bases[1].id = "qwen3";
      c.limits = Limits{}.info();
      c.limits.max_queue = 99;
      c.limits.max_sessions = 3;
      c.loss_fns = {"cross_entropy", "ppo"};
      c.encodings = {"B", "J"};
      r.body = c;
      break;
    }
    case Op::status: {
      StatusReply s;
      s.server_version = "0.1.0";
      s.uptime_s = 12.5;
      s.queue_depth = 3;
      s.parked = 1;
      s.running_sequences = 9;
      s.training_sessions = 2;
      s.requests_served = 1000;
      s.requests_failed = 4;
      s.tokens_per_s = 1234.5;
      s.device_slots = 8;
      s.device_slots_used = 5;
      s.host_cache_bytes = 1 << 20;
      s.host_cache_capacity = 1 << 30;
      s.loads_queued = 2;
      s.loads_running = 1;
      s.device_hit_rate = 0.75;
      s.host_hit_rate = 0.5;
      s.mean_load_wait_ms = 3.25;
      s.placements = {{"rev1", "device", 0, 2}, {"rev2", "host", -1, 0}};
      s.device = "cpu";
      s.bases = {{"stories260K", "cpu", "F32", 1 << 20, 1 << 22, 1 << 16, 1 << 17, 16, 2, 3, 1, 4},
                 {"Qwen/Qwen3-0.6B", "cpu", "F32", 5, 6, 7, 8, 4, 0, 0, 0, 0}};
      s.cold_parks = 9;
      s.busy_parks = 2;
      s.slot_evictions = 7;
      r.body = s;
      break;
    }
    case Op::create_training:
    case Op::create_training_from_state:
    case Op::load_state: r.body = session; break;
    case Op::forward:
    case Op::forward_backward: {
      ForwardBackwardReply b;
      b.loss_fn_outputs = {{{"logprobs", add_tensor(f, std::span<const float>(lps))}},
                           {{"logprobs", add_tensor(f, std::span<const float>(lps).first(2))}}};
      b.metrics = {{"loss:sum", 4.5}, {"n_tokens:sum", 5}};
      r.body = b;
      break;
    }
    case Op::optim_step: r.body = OptimStepReply{13, 0.125, true}; break;
    case Op::save_weights:
    case Op::save_state: r.body = SaveReply{"ab12", "spindle://alice/p@ab12", 4096, 1700000003600000}; break;
    case Op::close_training:
    case Op::catalog_delete: r.body = Empty{}; break;
    case Op::sample: {
      SampleReply s;
      s.revision_id = "ab12";
      for (int i = 0; i < 2; ++i)
        s.sequences.push_back({add_tensor(f, std::span<const int32_t>(tokens)),
                               add_tensor(f, std::span<const float>(lps)),
                               i ? "length" : "stop", "Once upon ✨"});
      s.prompt_logprobs = add_tensor(f, std::span<const float>(lps));
      const std::vector<int32_t> top_ids(lps.size() * 2, 7);
      const std::vector<float> top_lps(lps.size() * 2, -0.5f);
      s.topk_prompt_ids = add_tensor(f, std::span<const int32_t>(top_ids), {int64_t(lps.size()), 2});
      s.topk_prompt_logprobs = add_tensor(f, std::span<const float>(top_lps), {int64_t(lps.size()), 2});
      r.body = s;
      break;
    }
    case Op::compute_logprobs:
      r.body = ComputeLogprobsReply{"", add_tensor(f, std::span<const float>(lps))};
      break;
    case Op::catalog_list:
    case Op::catalog_search:
      r.body = PolicyListReply{{sample_policy(1), sample_policy(2)}, "next=="};
      break;
    case Op::catalog_show:
    case Op::catalog_fork:
    case Op::catalog_rollback:
    case Op::catalog_tag:
    case Op::catalog_promote:
    case Op::import_peft: r.body = policy; break;
    case Op::catalog_lineage:
      r.body = LineageReply{sample_revision(0),
                            {{sample_revision(1), 1}, {sample_revision(2), 2}},
                            {{sample_revision(3), -1}},
                            true,
                            false};
      break;
    case Op::export_peft:
      r.body = ExportPeftReply{"ab12", R"({"r": 8})", add_bytes(f, "safetensors-bytes")};
      break;
    case Op::tokenize:
      r.body = TokenizeReply{"stories260K", add_tensor(f, std::span<const int32_t>(tokens))};
      break;
    case Op::run_start: r.body = RunStartReply{"00ab12cd34ef5678", {"spindle://alice/a", "spindle://alice/b"}}; break;
    case Op::run_list:
    case Op::run_status:
    case Op::run_stop:
    case Op::run_resume: {
      const RunInfo run{"00ab12cd34ef5678", "alice", "running", "", 2, 3,
                        {"spindle://alice/a"}, R"({"steps": 3})", 1700000000000, 1700000001000};
      if (op == Op::run_list) {
        r.body = RunListReply{{run, run}, "12"};
      } else {
        r.body = RunStatusReply{run, {{1, "spindle://alice/a", R"({"reward_mean":0.5})"},
                                      {2, "spindle://alice/a", R"({"loss":-0.25})"}}};
      }
      break;
    }
    case Op::reward_test: {
      RewardTestReply b;
      b.revision_id = std::string(64, 'c');
      b.terms = {{"cat", "keywords", 1.5, {2, 0.5, 0.5, 0.0, 1.0, {1, 0, 1}}},
                 {"len", "length", -0.25, {2, 0.75, 0.0, 0.75, 0.75, {2, 0, 0}}}};
      b.total = {2, 0.5625, 0.75, -0.1875, 1.3125, {1, 0, 1}};
      b.samples.push_back({0, add_tensor(f, std::span<const int32_t>(tokens)), "a cat ✓", "stop",
                           {1.0, 0.75}, {"", "len 12"}, 1.3125});
      b.samples.push_back({1, add_tensor(f, std::span<const int32_t>(tokens.data(), 2)), "",
                           "length", {0.0, 0.75}, {"", ""}, -0.1875});
      r.body = b;
      break;
    }
    case Op::reward_plugins:
    case Op::plugin_rescan: {
      RewardPluginsReply b;
      b.plugins.push_back({"keywords", "keyword presence ✓", "1.0.0", 1,
                           R"({"type": "object", "properties": {"present": {"type": "array"}}})",
                           "/usr/lib/spindle/plugins/spindle_reward_keywords.so"});
      b.plugins.push_back({"old", "", "", 1, "{}", "/tmp/libspindle_reward_old.so"});
      r.body = b;
      break;
    }
    case Op::datasets: {
      DatasetsReply b;
      DatasetInfo arith{"arith", "two-number arithmetic", true, 4000, 200,
                        {{"37+45=", "82", "{}"}, {"1+2=", "3", R"({"a": 1})"}}, ""};
      DatasetInfo gsm{"gsm8k", "grade-school math", false, 0, 0, {}, "not found: train.jsonl"};
      b.datasets = {arith, gsm};
      r.body = b;
      break;
    }
    case Op::sample_stream: {
      SampleStreamReply b;
      b.final = true;
      b.revision_id = std::string(64, 'd');
      b.deltas.push_back({1,
                          add_tensor(f, std::span<const int32_t>(tokens.data(), 2)),
                          add_tensor(f, std::span<const float>(lps.data(), 2)),
                          {"Once", " ✓"}});
      SequenceMsg m;
      m.tokens = add_tensor(f, std::span<const int32_t>(tokens));
      m.logprobs = add_tensor(f, std::span<const float>(lps));
      m.stop_reason = "length";
      m.text = "Once ✓";
      b.sequences = {m};
      r.body = b;
      break;
    }
    case Op::subscribe: {
      EventReply b;
      b.topic = "metrics";
      b.run = RunStatusReply{{"00ab12cd34ef5678", "alice", "running", "", 2, 3,
                              {"spindle://alice/a"}, R"({"steps": 3})", 1700000000000, 1700000001000},
                             {{1, "spindle://alice/a", R"({"reward_mean":0.5})"}}};
      b.status.server_version = "spindled 0.1.0";
      b.status.placements = {{std::string(64, 'e'), "device", 3, 1}};
      r.body = b;
      break;
    }
    case Op::unsubscribe: r.body = Empty{}; break;
    case Op::detokenize: r.body = DetokenizeReply{"Qwen/Qwen3-0.6B", "Once upon ✨"}; break;
    case Op::tokenizer_info:
      r.body = TokenizerInfoReply{"Qwen/Qwen3-0.6B", "bpe", 151936, -1, 151645, 151643,
                                  "", "<|im_end|>", "<|endoftext|>",
                                  {{151643, "<|endoftext|>"}, {151645, "<|im_end|>"}},
                                  "{% for m in messages %}{{ m['content'] }}{% endfor %}", false};
      break;
    case Op::heartbeat: r.body = HeartbeatReply{60000, {"s-gone"}}; break;
    case Op::cluster_status: {
      ClusterStatusReply c;
      c.role = "coordinator";
      c.cluster_endpoint = "tcp://10.0.0.1:7879";
      ClusterWorkerMsg w;
      w.id = 2;
      w.name = "node2/cuda:0";
      w.base = "Qwen/Qwen3-0.6B";
      w.device = "cuda:0 (NVIDIA H200)";
      w.host = "node2";
      w.pid = 4242;
      w.alive = true;
      w.last_seen_ms = 120;
      w.base_bytes = 1ull << 30;
      w.device_free_bytes = 130ull << 30;
      w.serving_slots = 16;
      w.slots_used = 3;
      w.queue_depth = 7;
      w.loader_queue = 1;
      w.sessions = 2;
      w.tokens_per_s = 1234.5;
      w.forwarded = 99;
      w.placed_policies = 40;
      c.workers = {w};
      c.placed_policies = 40;
      c.replica_placements = 44;
      c.data_parallel = {{"s-0123456789ab", "spindle://local/dp", {2, 0, 1}, 1}};
      r.body = c;
      break;
    }
  }
  return r;
}

inline std::vector<std::string> as_parts(const std::string& header, const Frames& frames) {
  std::vector<std::string> parts{header};
  parts.insert(parts.end(), frames.begin(), frames.end());
  return parts;
}
inline std::vector<std::string> encode_parts(const Request& r) {
  return as_parts(encode_request_header(r), r.frames);
}
inline std::vector<std::string> encode_parts(const Reply& r) {
  return as_parts(encode_reply_header(r), r.frames);
}

inline std::vector<Op> all_ops() {
  std::vector<Op> ops;
  for (int i = 0; i < kOpCount; ++i) ops.push_back(Op(i));
  return ops;
}

}  // namespace spindle::protocol::testing
