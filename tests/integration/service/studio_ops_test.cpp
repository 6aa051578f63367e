// The Studio's request ops against a real spindled on stories260K: reward_plugins lists the
// built-in plugins with schema and version; plugin_rescan picks up a plugin file copied into the
// daemon's plugin folder after start (listed, and a reward_test with it works on every worker);
// datasets lists arith, gsm8k and countdown with examples; sample_stream's deltas concatenate to
// its final sequences, which equal `sample` with the same seed (greedy and seeded, 2 samples),
// through the raw wire and through the C++ client's helpers in both encodings; each delta has a
// text piece per token, and the pieces concatenate to the final text (after BOS too; a stop
// token's piece is "", a stop string cuts the text inside the pieces).

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

// Streams `params` from `prompt` (2 samples), checks the deltas against the final sequences and
// those against `sample`; returns each sequence's concatenated pieces (one piece per token)
// and its final message's sequences.
struct Streamed {
  std::vector<Seq> final;
  std::vector<std::vector<std::string>> pieces;
};
Streamed check_stream_equals_sample(RawClient& c, const std::vector<int32_t>& prompt,
                                    const SamplingParamsMsg& params) {
  Frames f1, f2;
  SampleRequest req = sample_request("stories260K", prompt, f1, 0, 0.0f, 0, 2);
  req.sampling_params = params;
  sample_request("stories260K", prompt, f2, 0, 0.0f, 0, 2);
  const auto plain = c.ok<SampleReply>(Op::sample, req, f1);
  const std::vector<Seq> want = read_sequences(plain.sequences, c.last_frames);

  Streamed out;
  const uint64_t id = c.send(Op::sample_stream, req, f2);
  const std::vector<Reply> msgs = read_stream(c, id);
  EXPECT_GE(msgs.size(), 2u);
  if (msgs.size() < 2) return out;
  std::vector<Seq> concat(2);
  out.pieces.resize(2);
  for (size_t i = 0; i + 1 < msgs.size(); ++i) {
    EXPECT_TRUE(msgs[i].ok);
    const auto& m = std::get<SampleStreamReply>(msgs[i].body);
    EXPECT_FALSE(m.final);
    EXPECT_TRUE(m.sequences.empty());
    EXPECT_FALSE(m.deltas.empty());
    for (const auto& d : m.deltas) {
      EXPECT_LT(d.sequence, 2u);
      if (d.sequence >= 2) continue;
      const auto t = read_int32(d.tokens, msgs[i].frames, "tokens");
      const auto l = read_float32(d.logprobs, msgs[i].frames, "logprobs");
      EXPECT_FALSE(t.empty());
      EXPECT_EQ(t.size(), l.size());
      EXPECT_EQ(d.pieces.size(), t.size()) << "message " << i << " sequence " << d.sequence;
      concat[d.sequence].tokens.insert(concat[d.sequence].tokens.end(), t.begin(), t.end());
      concat[d.sequence].logprobs.insert(concat[d.sequence].logprobs.end(), l.begin(), l.end());
      auto& p = out.pieces[d.sequence];
      p.insert(p.end(), d.pieces.begin(), d.pieces.end());
    }
  }
  EXPECT_TRUE(msgs.back().ok) << msgs.back().error.message;
  const auto& fin = std::get<SampleStreamReply>(msgs.back().body);
  EXPECT_TRUE(fin.final);
  EXPECT_TRUE(fin.deltas.empty());
  out.final = read_sequences(fin.sequences, msgs.back().frames);
  EXPECT_EQ(out.final, want);
  EXPECT_EQ(out.final.size(), 2u);
  for (size_t s = 0; s < out.final.size() && s < 2; ++s) {
    EXPECT_EQ(concat[s].tokens, out.final[s].tokens) << "sequence " << s;
    EXPECT_EQ(concat[s].logprobs, out.final[s].logprobs) << "sequence " << s;
  }
  return out;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += p;
  return out;
}

SamplingParamsMsg params(int32_t max_tokens, float temperature, uint64_t seed) {
  SamplingParamsMsg p;
  p.max_tokens = max_tokens;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

TEST_F(StudioOps, SampleStreamEqualsSample) {
  RawClient alice(daemon_->ipc(), kTokenA);
  const std::vector<int32_t> prompt = {1, 403, 407, 261};
  for (auto [temperature, seed] : {std::pair(0.0f, uint64_t(0)), std::pair(0.9f, uint64_t(1234))}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    const Streamed got = check_stream_equals_sample(alice, prompt, params(24, temperature, seed));
    // No stop token or string: the pieces concatenate to exactly the final text.
    for (size_t s = 0; s < got.final.size(); ++s) {
      EXPECT_EQ(joined(got.pieces[s]), got.final[s].text) << "sequence " << s;
    }
  }
}

// The pieces render each token as decode does after the token before it, so they concatenate to
// the final text exactly — the llama2.c rule that drops the first piece's leading space after
// BOS included (a prompt of BOS alone) — with two documented exceptions: a stop token's piece is
// "" (its text is not part of `text`) and a stop string cuts `text` where it starts (the pieces
// are whole tokens, so they go on with the stop string).
TEST_F(StudioOps, SampleStreamPiecesConcatenateToTheText) {
  RawClient alice(daemon_->ipc(), kTokenA);
  const std::vector<int32_t> bos = {1};
  const Streamed plain = check_stream_equals_sample(alice, bos, params(32, 0.0f, 0));
  ASSERT_EQ(plain.final.size(), 2u);
  const Seq& greedy = plain.final[0];
  const std::vector<std::string>& pieces = plain.pieces[0];
  ASSERT_EQ(pieces.size(), greedy.tokens.size());
  ASSERT_GE(pieces.size(), 8u);
  EXPECT_EQ(joined(pieces), greedy.text);
  EXPECT_FALSE(greedy.text.starts_with(' ')) << "leading space after BOS kept: " << greedy.text;
  EXPECT_NE(greedy.text.find(' '), std::string::npos) << greedy.text;  // later pieces keep theirs

  // A stop token: the greedy sequence's 6th token ends it at its first occurrence, piece "".
  {
    SCOPED_TRACE("stop token");
    const int32_t stop = greedy.tokens[5];
    const size_t end =
        size_t(std::find(greedy.tokens.begin(), greedy.tokens.end(), stop) - greedy.tokens.begin());
    SamplingParamsMsg p = params(32, 0.0f, 0);
    p.stop_token_ids = {stop};
    const Streamed got = check_stream_equals_sample(alice, bos, p);
    ASSERT_EQ(got.final.size(), 2u);
    EXPECT_EQ(got.final[0].stop_reason, "stop");
    ASSERT_EQ(got.pieces[0].size(), end + 1);
    EXPECT_EQ(got.pieces[0].back(), "");
    EXPECT_EQ(joined(got.pieces[0]), got.final[0].text);
    EXPECT_EQ(std::vector(got.pieces[0].begin(), got.pieces[0].end() - 1),
              std::vector(pieces.begin(), pieces.begin() + std::ptrdiff_t(end)));
  }
  // A stop string inside the 5th piece: the text stops before it, the pieces include it.
  {
    SCOPED_TRACE("stop string");
    std::string before;
    for (size_t i = 0; i < 4; ++i) before += pieces[i];
    ASSERT_FALSE(pieces[4].empty());
    const std::string stop = pieces[4];
    SamplingParamsMsg p = params(32, 0.0f, 0);
    p.stop_strings = {stop};
    const Streamed got = check_stream_equals_sample(alice, bos, p);
    ASSERT_EQ(got.final.size(), 2u);
    EXPECT_EQ(got.final[0].stop_reason, "stop");
    const std::string all = joined(got.pieces[0]);
    EXPECT_TRUE(all.starts_with(got.final[0].text + stop)) << all << " | " << got.final[0].text;
    EXPECT_LE(got.final[0].text.size(), before.size());
  }
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
    std::vector<std::string> text(2);
    size_t calls = 0;
    const SampleResult got =
        c.sample_stream("stories260K", prompt, 2, p,
                        [&](uint32_t s, std::span<const int32_t> t, std::span<const float> l,
                            std::span<const std::string> pieces) {
                          ++calls;
                          EXPECT_EQ(pieces.size(), t.size());
                          tokens.at(s).insert(tokens[s].end(), t.begin(), t.end());
                          logprobs.at(s).insert(logprobs[s].end(), l.begin(), l.end());
                          for (const auto& piece : pieces) text.at(s) += piece;
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
      EXPECT_EQ(text[s], want.sequences[s].text);  // no stop: the pieces make the text
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
