// The Studio's request ops against a real spindled on stories260K: reward_plugins lists the
// built-in plugins with schema and version; plugin_rescan picks up a plugin file copied into the
// daemon's plugin folder after start (listed, and a reward_test with it works on every worker);
// datasets lists arith, gsm8k and countdown with examples; sample_stream's deltas concatenate to
// its final sequences, which equal `sample` with the same seed (greedy and seeded, 2 samples),
// through the raw wire and through the C++ client's helpers in both encodings.

#include <nlohmann/json.hpp>

#include "spindle/protocol/client.h"
#include "stream_util.h"

namespace spindle::testing {
namespace {

using namespace protocol;
using json = nlohmann::json;

class StudioOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(stories_model())) return;
    const fs::path dir = two_tenant_dir("studio");
    plugin_dir_ = new fs::path(dir / "plugins");
    fs::create_directories(*plugin_dir_);
    ::setenv("SPINDLE_REWARD_PLUGIN_PATH", plugin_dir_->c_str(), 1);
    daemon_ = new Daemon(dir, {"--data-root", (shared_dir() / "data").string()});
  }
  static void TearDownTestSuite() {
    if (daemon_) EXPECT_EQ(daemon_->terminate(), 0);
    delete daemon_;
    delete plugin_dir_;
    daemon_ = nullptr;
    plugin_dir_ = nullptr;
  }
  void SetUp() override {
    if (!daemon_) GTEST_SKIP() << "fixture missing: " << stories_model().string();
  }
  static Client client(Encoding encoding) {
    ClientOptions o;
    o.endpoint = daemon_->ipc();
    o.token = kTokenA;
    o.encoding = encoding;
    return Client(o);
  }
  static Daemon* daemon_;
  static fs::path* plugin_dir_;
};
Daemon* StudioOps::daemon_ = nullptr;
fs::path* StudioOps::plugin_dir_ = nullptr;

const RewardPluginInfo* find_plugin(const RewardPluginsReply& r, const std::string& name) {
  for (const auto& p : r.plugins)
    if (p.name == name) return &p;
  return nullptr;
}

TEST_F(StudioOps, RewardPluginsListsBuiltInsWithSchemaAndVersion) {
  RawClient alice(daemon_->ipc(), kTokenA);
  const auto r = alice.ok<RewardPluginsReply>(Op::reward_plugins, Empty{});
  for (const char* name : {"countdown", "json_valid", "keywords", "length", "numeric_match", "regex"}) {
    SCOPED_TRACE(name);
    const RewardPluginInfo* p = find_plugin(r, name);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->version, "1.0.0");
    EXPECT_EQ(p->abi_version, 1u);
    EXPECT_FALSE(p->description.empty());
    const json schema = json::parse(p->config_schema_json);
    EXPECT_EQ(schema.value("type", ""), "object");
    EXPECT_TRUE(fs::exists(p->path)) << p->path;
  }
  for (size_t i = 1; i < r.plugins.size(); ++i) EXPECT_LT(r.plugins[i - 1].name, r.plugins[i].name);
  // The typed helper and the J encoding give the same list.
  EXPECT_EQ(client(Encoding::json).reward_plugins(), r);
}

TEST_F(StudioOps, PluginRescanPicksUpANewPlugin) {
  const fs::path built = binary_dir() / "tests" / "rescan_plugins" / "spindle_reward_rescan_probe.so";
  ASSERT_TRUE(fs::exists(built)) << built;
  RawClient alice(daemon_->ipc(), kTokenA);
  // Both workers start their hosts before the file exists.
  std::vector<uint64_t> before;
  for (int i = 0; i < 4; ++i) before.push_back(alice.send(Op::reward_plugins, Empty{}));
  for (const Reply& r : replies_to(alice, before)) {
    ASSERT_TRUE(r.ok) << r.error.message;
    EXPECT_EQ(find_plugin(std::get<RewardPluginsReply>(r.body), "rescan_probe"), nullptr);
  }
  fs::copy_file(built, *plugin_dir_ / built.filename(), fs::copy_options::overwrite_existing);

  const auto listed = client(Encoding::binary).plugin_rescan();
  const RewardPluginInfo* p = find_plugin(listed, "rescan_probe");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->version, "0.3.1");
  EXPECT_EQ(fs::path(p->path).parent_path(), *plugin_dir_);
  EXPECT_NE(find_plugin(listed, "keywords"), nullptr);

  // Every worker now scores with it (several requests at once reach both workers).
  RewardTestRequest t;
  t.spec_json = R"({"terms": [{"name": "probe", "plugin": "rescan_probe", "weight": 2.0, "config": {}}]})";
  t.rows = {{"Once upon a time", "", ""}};
  t.address = "stories260K";
  t.num_samples = 2;
  t.sampling_params.max_tokens = 4;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(alice.send(Op::reward_test, t));
  for (const Reply& r : replies_to(alice, ids)) {
    ASSERT_TRUE(r.ok) << r.error.code << ": " << r.error.message;
    const auto& body = std::get<RewardTestReply>(r.body);
    ASSERT_EQ(body.samples.size(), 2u);
    for (const auto& s : body.samples) EXPECT_DOUBLE_EQ(s.total, 0.5);
  }
}

TEST_F(StudioOps, DatasetsListBuiltInsWithExamples) {
  RawClient alice(daemon_->ipc(), kTokenA);
  const auto r = alice.ok<DatasetsReply>(Op::datasets, DatasetsRequest{2});
  ASSERT_EQ(r.datasets.size(), 3u);
  EXPECT_EQ(r.datasets[0].name, "arith");
  EXPECT_EQ(r.datasets[1].name, "gsm8k");
  EXPECT_EQ(r.datasets[2].name, "countdown");
  const DatasetInfo& arith = r.datasets[0];
  EXPECT_TRUE(arith.available);
  EXPECT_GT(arith.rows, 0);
  EXPECT_GT(arith.heldout_rows, 0);
  ASSERT_EQ(arith.examples.size(), 2u);
  EXPECT_NE(arith.examples[0].prompt.find('='), std::string::npos);
  EXPECT_FALSE(arith.examples[0].reference.empty());
  for (size_t i = 1; i < 3; ++i) {
    const DatasetInfo& ds = r.datasets[i];
    SCOPED_TRACE(ds.name);
    EXPECT_FALSE(ds.description.empty());
    const fs::path folder = shared_dir() / "data" / ds.name;
    if (!fs::exists(folder)) {
      EXPECT_FALSE(ds.available);
      EXPECT_FALSE(ds.error.empty());
      std::cout << "[  SKIPPED ] " << ds.name << " checks: " << folder << " is absent\n";
      continue;
    }
    ASSERT_TRUE(ds.available) << ds.error;
    EXPECT_GT(ds.rows, 0);
    ASSERT_EQ(ds.examples.size(), 2u);
    EXPECT_FALSE(ds.examples[0].prompt.empty());
    EXPECT_FALSE(ds.examples[0].reference.empty());
    EXPECT_TRUE(json::parse(ds.examples[0].metadata_json).is_object());
  }
  // Cached: the same answer again, examples cut to what is asked.
  const auto none = client(Encoding::json).datasets(0);
  ASSERT_EQ(none.datasets.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(none.datasets[i].examples.empty());
    EXPECT_EQ(none.datasets[i].rows, r.datasets[i].rows);
  }
  EXPECT_EQ(alice.call(Op::datasets, DatasetsRequest{21}).error.code, errc::limit_exceeded);
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string stop_reason, text;
  bool operator==(const Seq&) const = default;
};

std::vector<Seq> read_sequences(const std::vector<SequenceMsg>& m, const Frames& frames) {
  std::vector<Seq> out;
  for (const auto& s : m) {
    out.push_back({read_int32(s.tokens, frames, "tokens"), read_float32(s.logprobs, frames, "logprobs"),
                   s.stop_reason, s.text});
  }
  return out;
}

void check_stream_equals_sample(RawClient& c, float temperature, uint64_t seed) {
  SCOPED_TRACE("temperature " + std::to_string(temperature));
  const std::vector<int32_t> prompt = {1, 403, 407, 261};
  Frames f1, f2;
  const SampleRequest req = sample_request("stories260K", prompt, f1, 24, temperature, seed, 2);
  sample_request("stories260K", prompt, f2, 24, temperature, seed, 2);
  const auto plain = c.ok<SampleReply>(Op::sample, req, f1);
  const std::vector<Seq> want = read_sequences(plain.sequences, c.last_frames);

  const uint64_t id = c.send(Op::sample_stream, req, f2);
  const std::vector<Reply> msgs = read_stream(c, id);
  ASSERT_GE(msgs.size(), 2u);
  std::vector<Seq> concat(2);
  for (size_t i = 0; i + 1 < msgs.size(); ++i) {
    ASSERT_TRUE(msgs[i].ok);
    const auto& m = std::get<SampleStreamReply>(msgs[i].body);
    EXPECT_FALSE(m.final);
    EXPECT_TRUE(m.sequences.empty());
    ASSERT_FALSE(m.deltas.empty());
    for (const auto& d : m.deltas) {
      ASSERT_LT(d.sequence, 2u);
      const auto t = read_int32(d.tokens, msgs[i].frames, "tokens");
      const auto l = read_float32(d.logprobs, msgs[i].frames, "logprobs");
      ASSERT_FALSE(t.empty());
      ASSERT_EQ(t.size(), l.size());
      concat[d.sequence].tokens.insert(concat[d.sequence].tokens.end(), t.begin(), t.end());
      concat[d.sequence].logprobs.insert(concat[d.sequence].logprobs.end(), l.begin(), l.end());
    }
  }
  ASSERT_TRUE(msgs.back().ok) << msgs.back().error.message;
  const auto& fin = std::get<SampleStreamReply>(msgs.back().body);
  EXPECT_TRUE(fin.final);
  EXPECT_TRUE(fin.deltas.empty());
  const std::vector<Seq> got = read_sequences(fin.sequences, msgs.back().frames);
  EXPECT_EQ(got, want);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(concat[s].tokens, got[s].tokens) << "sequence " << s;
    EXPECT_EQ(concat[s].logprobs, got[s].logprobs) << "sequence " << s;
  }
}

TEST_F(StudioOps, SampleStreamEqualsSample) {
  RawClient alice(daemon_->ipc(), kTokenA);
  check_stream_equals_sample(alice, 0.0f, 0);
  check_stream_equals_sample(alice, 0.9f, 1234);
}

TEST_F(StudioOps, ClientSampleStreamHelper) {
  for (Encoding e : {Encoding::binary, Encoding::json}) {
    SCOPED_TRACE(e == Encoding::json ? "J" : "B");
    Client c = client(e);
    const std::vector<int32_t> prompt = {1, 403, 407};
    SamplingParamsMsg p;
    p.max_tokens = 16;
    p.temperature = 0.8f;
    p.seed = 5;
    const SampleResult want = c.sample("stories260K", prompt, 2, p);
    std::vector<std::vector<int32_t>> tokens(2);
    std::vector<std::vector<float>> logprobs(2);
    size_t calls = 0;
    const SampleResult got = c.sample_stream(
        "stories260K", prompt, 2, p,
        [&](uint32_t s, std::span<const int32_t> t, std::span<const float> l) {
          ++calls;
          tokens.at(s).insert(tokens[s].end(), t.begin(), t.end());
          logprobs.at(s).insert(logprobs[s].end(), l.begin(), l.end());
        });
    EXPECT_GT(calls, 2u);
    ASSERT_EQ(got.sequences.size(), 2u);
    EXPECT_EQ(got.revision_id, want.revision_id);
    for (size_t s = 0; s < 2; ++s) {
      EXPECT_EQ(got.sequences[s].tokens, want.sequences[s].tokens);
      EXPECT_EQ(got.sequences[s].logprobs, want.sequences[s].logprobs);
      EXPECT_EQ(got.sequences[s].text, want.sequences[s].text);
      EXPECT_EQ(got.sequences[s].stop_reason, want.sequences[s].stop_reason);
      EXPECT_EQ(tokens[s], want.sequences[s].tokens);
      EXPECT_EQ(logprobs[s], want.sequences[s].logprobs);
    }
    // Errors end the stream: another tenant's address.
    try {
      c.sample_stream("spindle://bob/x", prompt, 1, p, {});
      ADD_FAILURE() << "no error";
    } catch (const ClientError& err) {
      EXPECT_EQ(err.code(), errc::not_found);
    }
  }
  // A stream counts once in the queue: after all this, nothing is left in flight.
  RawClient alice(daemon_->ipc(), kTokenA);
  EXPECT_EQ(alice.ok<StatusReply>(Op::status, Empty{}).queue_depth, 0u);
}

}  // namespace
}  // namespace spindle::testing
