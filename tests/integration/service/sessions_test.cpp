// Training sessions in a real spindled: a pipelined load_state is ordered before the requests
// sent after it (they see the loaded weights), leases close silent sessions and heartbeats keep
// them, a weights-only resume starts a fresh optimizer on a forked policy, and ephemeral
// revisions serve until a sweep collects them.

#include <cmath>

#include "daemon.h"
#include "spindle/engine/tokenizer.h"

namespace spindle::testing {
namespace {

using namespace protocol;

std::vector<int32_t> encode(const std::string& text) {
  const auto tok = engine::load_tokenizer(stories_model().parent_path() / "tok512.bin");
  return tok->encode(text);
}

std::vector<float> floats(const TensorRef& ref, const Frames& frames) {
  return read_float32(ref, frames, "test");
}

CreateTrainingRequest create(const std::string& policy) { return training_request(policy, 5); }

class Sessions : public ::testing::Test {
 protected:
  void start(std::vector<std::string> args) {
    if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
    daemon_ = std::make_unique<Daemon>(fresh_dir("sessions"), std::move(args));
    client_ = std::make_unique<RawClient>(daemon_->ipc(), daemon_->token());
  }
  void TearDown() override {
    if (daemon_) EXPECT_EQ(daemon_->terminate(), 0);
  }

  // The session's forward logprobs of `seq` (no gradients).
  std::vector<float> forward(const std::string& session, const std::vector<int32_t>& seq) {
    Frames f;
    const auto req = fb_request(session, {seq}, f);
    const auto out = client_->ok<ForwardBackwardReply>(Op::forward, req, f);
    return floats(out.loss_fn_outputs.at(0).at(0).tensor, client_->last_frames);
  }

  void train(const std::string& session, const std::vector<int32_t>& seq, int steps) {
    for (int i = 0; i < steps; ++i) train_step(*client_, session, seq, 2e-2f);
  }

  uint64_t open_sessions() {
    return client_->ok<StatusReply>(Op::status, Empty{}).training_sessions;
  }

  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<RawClient> client_;
};

// A greedy 4-token sample of "Once" from `address`.
Reply sample_once(RawClient& client, const std::string& address) {
  return sample_greedy(client, address, encode("Once"), 4);
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

// load_state reads its revision on the catalog thread; a forward sent right behind it, without
// waiting, must still run on the loaded weights, not the session's old ones.
TEST_F(Sessions, PipelinedLoadStateRunsBeforeLaterRequests) {
  start({});
  const auto s = client_->ok<TrainingSessionReply>(Op::create_training, create("order"));
  const std::vector<int32_t> seq = encode("Once upon a time there was a little cat.");
  const auto fresh = client_->ok<SaveReply>(Op::save_state, SaveRequest{s.session_id, "fresh", ""});
  const std::vector<float> before = forward(s.session_id, seq);
  train(s.session_id, seq, 4);
  const std::vector<float> trained = forward(s.session_id, seq);
  ASSERT_GT(max_diff(before, trained), 1e-2) << "training did not move the weights";

  LoadStateRequest load{s.session_id, fresh.address, true};
  Frames f;
  const auto fwd = fb_request(s.session_id, {seq}, f);
  const uint64_t load_id = client_->send(Op::load_state, load);
  const uint64_t fwd_id = client_->send(Op::forward, fwd, f);
  std::optional<Reply> load_reply, fwd_reply;
  Frames fwd_frames;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((!load_reply || !fwd_reply) && std::chrono::steady_clock::now() < deadline) {
    auto r = client_->receive(200);
    if (!r) continue;
    if (r->request_id == load_id) load_reply = *r;
    if (r->request_id == fwd_id) fwd_reply = *r;
  }
  ASSERT_TRUE(load_reply && fwd_reply);
  ASSERT_TRUE(load_reply->ok) << load_reply->error.message;
  ASSERT_TRUE(fwd_reply->ok) << fwd_reply->error.message;
  const auto& out = std::get<ForwardBackwardReply>(fwd_reply->body);
  const std::vector<float> after = floats(out.loss_fn_outputs.at(0).at(0).tensor, fwd_reply->frames);
  EXPECT_LT(max_diff(after, before), 1e-5);
  EXPECT_GT(max_diff(after, trained), 1e-2);
  const auto& loaded = std::get<TrainingSessionReply>(load_reply->body);
  EXPECT_EQ(loaded.revision_id, fresh.revision_id);
}

TEST_F(Sessions, SilentSessionExpiresAndHeartbeatKeepsOneAlive) {
  start({"--session-lease-s", "1.5"});
  const auto silent = client_->ok<TrainingSessionReply>(Op::create_training, create("silent"));
  const auto kept = client_->ok<TrainingSessionReply>(Op::create_training, create("kept"));
  EXPECT_EQ(silent.lease_ms, 1500u);
  const auto saved = client_->ok<SaveReply>(Op::save_weights, SaveRequest{silent.session_id, "", ""});
  for (int i = 0; i < 12; ++i) {  // 3.6 s of heartbeats for `kept` only
    const auto hb = client_->ok<HeartbeatReply>(Op::heartbeat, HeartbeatRequest{{kept.session_id}});
    EXPECT_TRUE(hb.unknown.empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(open_sessions(), 1u);
  const auto hb = client_->ok<HeartbeatReply>(
      Op::heartbeat, HeartbeatRequest{{silent.session_id, kept.session_id}});
  EXPECT_EQ(hb.unknown, std::vector<std::string>{silent.session_id});
  Frames f;
  const auto fwd = fb_request(silent.session_id, {encode("Once")}, f);
  const Reply r = client_->call(Op::forward, fwd, f);
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.code, errc::not_found);
  EXPECT_NE(r.error.message.find("lease expired"), std::string::npos) << r.error.message;
  // The expired session's saved revision is intact and serves.
  const Reply sample = sample_once(*client_, saved.address);
  ASSERT_TRUE(sample.ok) << sample.error.message;
  EXPECT_EQ(std::get<SampleReply>(sample.body).revision_id, saved.revision_id);
  EXPECT_NE(daemon_->log().find("expired after"), std::string::npos);
}

// Tinker's create_training_client_from_state: weights only, a fresh optimizer, a new policy.
TEST_F(Sessions, WeightsOnlyResumeForksWithAFreshOptimizer) {
  start({});
  const auto s = client_->ok<TrainingSessionReply>(Op::create_training, create("src"));
  const std::vector<int32_t> seq = encode("The dog ran to the park.");
  train(s.session_id, seq, 2);
  const auto state = client_->ok<SaveReply>(Op::save_state, SaveRequest{s.session_id, "", ""});
  const std::vector<float> at_state = forward(s.session_id, seq);

  CreateTrainingFromStateRequest exact{state.address, true, false, "", ""};
  const auto resumed = client_->ok<TrainingSessionReply>(Op::create_training_from_state, exact);
  EXPECT_EQ(resumed.policy_address, "spindle://local/src");
  CreateTrainingFromStateRequest fork{state.address, false, true, "src-line2", ""};
  const auto forked = client_->ok<TrainingSessionReply>(Op::create_training_from_state, fork);
  EXPECT_EQ(forked.policy_address, "spindle://local/src-line2");
  EXPECT_EQ(forked.revision_id, state.revision_id);
  EXPECT_EQ(forked.step, 2);
  EXPECT_LT(max_diff(forward(forked.session_id, seq), at_state), 1e-5);

  // The same gradient step from the same weights: AdamW's first step differs from its third
  // (bias-corrected moments), so a fresh optimizer and the restored one part ways.
  train(resumed.session_id, seq, 1);
  train(forked.session_id, seq, 1);
  EXPECT_GT(max_diff(forward(resumed.session_id, seq), forward(forked.session_id, seq)), 1e-6);
  // The source's head did not move with the fork's saves.
  const auto fork_saved = client_->ok<SaveReply>(Op::save_weights, SaveRequest{forked.session_id, "", ""});
  const auto src = client_->ok<PolicyReply>(Op::catalog_show, AddressRequest{"spindle://local/src"});
  EXPECT_EQ(src.policy.head, state.revision_id);
  EXPECT_NE(fork_saved.revision_id, state.revision_id);
}

TEST_F(Sessions, EphemeralRevisionServesThenExpires) {
  start({"--expiry-sweep-s", "0.5"});
  const auto s = client_->ok<TrainingSessionReply>(Op::create_training, create("eph"));
  train(s.session_id, encode("Once upon a time"), 1);
  SaveRequest save{s.session_id, "sampler", "", 2};
  const auto saved = client_->ok<SaveReply>(Op::save_weights, save);
  EXPECT_GT(saved.expires_ms, 0);
  const auto shown = client_->ok<PolicyReply>(Op::catalog_show, AddressRequest{saved.address});
  EXPECT_EQ(shown.revision.expires_ms, saved.expires_ms);
  EXPECT_FALSE(shown.revision.expired);
  const Reply sampled = sample_once(*client_, saved.address);
  ASSERT_TRUE(sampled.ok) << sampled.error.message;
  EXPECT_EQ(std::get<SampleReply>(sampled.body).revision_id, saved.revision_id);

  // A promoted one stays.
  const auto kept = client_->ok<SaveReply>(Op::save_weights, save);
  client_->ok<PolicyReply>(Op::catalog_promote, AddressRequest{kept.address});
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  const Reply gone = sample_once(*client_, saved.address);
  ASSERT_FALSE(gone.ok);
  EXPECT_EQ(gone.error.code, errc::not_found);
  EXPECT_NE(gone.error.message.find("expired"), std::string::npos) << gone.error.message;
  // Still shown (lineage stays whole), marked expired; the policy whose head it was too.
  const auto shown_expired = client_->ok<PolicyReply>(Op::catalog_show, AddressRequest{saved.address});
  EXPECT_TRUE(shown_expired.revision.expired);
  const auto lineage = client_->ok<LineageReply>(
      Op::catalog_lineage, LineageRequest{kept.address, 10, 0});
  ASSERT_FALSE(lineage.ancestors.empty());
  EXPECT_TRUE(lineage.ancestors.front().revision.expired);
  EXPECT_EQ(lineage.revision.expires_ms, 0);
  EXPECT_TRUE(sample_once(*client_, kept.address).ok);
}

}  // namespace
}  // namespace spindle::testing
