// A real spindled over IPC: training, save -> serve handoff, sampling determinism, logprob
// consistency, catalog operations and PEFT export/import, against independent references
// (the `spindle generate` CLI, the training forward's own logprobs).

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

std::vector<int32_t> ints(const TensorRef& ref, const Frames& frames) {
  return read_int32(ref, frames, "test");
}
std::vector<float> floats(const TensorRef& ref, const Frames& frames) {
  return read_float32(ref, frames, "test");
}

class ServiceIpc : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
    daemon_ = std::make_unique<Daemon>(fresh_dir("ipc"), std::vector<std::string>{});
    client_ = std::make_unique<RawClient>(daemon_->ipc(), daemon_->token());
  }
  void TearDown() override {
    if (daemon_) EXPECT_EQ(daemon_->terminate(), 0);
  }
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<RawClient> client_;
};

TEST_F(ServiceIpc, HandshakeAndCapabilities) {
  const auto h = client_->ok<HandshakeReply>(Op::handshake, HandshakeRequest{"test"});
  EXPECT_EQ(h.tenant, "local");
  EXPECT_EQ(h.protocol_version, kProtocolVersion);
  const auto c = client_->ok<CapabilitiesReply>(Op::capabilities, Empty{});
  ASSERT_EQ(c.bases.size(), 1u);
  EXPECT_EQ(c.bases[0].id, "stories260K");
  EXPECT_EQ(c.bases[0].vocab_size, 512);
  EXPECT_EQ(c.limits.max_queue, 256u);
  EXPECT_EQ(c.limits.max_sessions, 8u);
  EXPECT_EQ(c.limits.max_rank, 64u);
  const auto s = client_->ok<StatusReply>(Op::status, Empty{});
  EXPECT_EQ(s.training_sessions, 0u);
  // The IPC socket is private to its owner.
  const auto perms = fs::status(daemon_->data_dir() / "spindled.sock").permissions();
  EXPECT_EQ(perms & (fs::perms::group_all | fs::perms::others_all), fs::perms::none);
}

TEST_F(ServiceIpc, GreedyBaseSampleEqualsSpindleGenerate) {
  const std::string prompt = "Once upon a time";
  Frames frames;
  SampleRequest s = sample_request("stories260K", encode(prompt), frames, 40, 0.0f, 0);
  s.sampling_params.stop_token_ids = {1, 2};  // BOS and EOS, as `spindle generate` stops
  const auto r = client_->ok<SampleReply>(Op::sample, s, frames);
  ASSERT_EQ(r.sequences.size(), 1u);
  EXPECT_EQ(r.revision_id, "");
  const RunResult cli = run_spindle({"generate", "--model", stories_model().string(), "--prompt",
                                     prompt, "--max-tokens", "40", "--temperature", "0"});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(r.sequences[0].text + "\n", cli.out);
}

TEST_F(ServiceIpc, TrainSaveServeAndCatalog) {
  CreateTrainingRequest create;
  create.base_model = "stories260K";
  create.policy = "tiny";
  create.rank = 4;
  create.alpha = 8;
  create.seed = 3;
  const auto session = client_->ok<TrainingSessionReply>(Op::create_training, create);
  EXPECT_EQ(session.policy_address, "spindle://local/tiny");
  EXPECT_EQ(session.rank, 4);

  const std::vector<std::vector<int32_t>> data = {encode("Once upon a time there was a cat."),
                                                   encode("The dog ran to the park.")};
  Frames f1;
  const auto fb1_req = fb_request(session.session_id, data, f1);
  const auto fb1 = client_->ok<ForwardBackwardReply>(Op::forward_backward, fb1_req, f1);
  ASSERT_EQ(fb1.loss_fn_outputs.size(), 2u);
  AdamParamsMsg adam;
  adam.learning_rate = 5e-3f;
  const auto step = client_->ok<OptimStepReply>(Op::optim_step, OptimStepRequest{session.session_id, adam});
  EXPECT_EQ(step.step, 1);
  EXPECT_GT(step.grad_norm, 0.0);
  Frames f2;
  const auto fb2_req = fb_request(session.session_id, data, f2);
  const auto fb2 = client_->ok<ForwardBackwardReply>(Op::forward_backward, fb2_req, f2);
  EXPECT_LT(metric(fb2, "loss:sum"), metric(fb1, "loss:sum"));
  EXPECT_EQ(metric(fb2, "n_tokens:sum"), metric(fb1, "n_tokens:sum"));
  client_->ok<OptimStepReply>(Op::optim_step, OptimStepRequest{session.session_id, adam});

  const auto saved = client_->ok<SaveReply>(Op::save_weights, SaveRequest{session.session_id, "first", ""});
  EXPECT_EQ(saved.address, "spindle://local/tiny@" + saved.revision_id);
  EXPECT_GT(saved.bytes, 0);

  // Same revision, same seed: same tokens.
  const auto prompt = encode("Once upon a time");
  Frames s1, s2;
  const auto a_req = sample_request(saved.address, prompt, s1, 24, 1.0f, 7, 2);
  const auto a = client_->ok<SampleReply>(Op::sample, a_req, s1);
  const Frames fa = client_->last_frames;
  const auto b_req = sample_request(saved.address, prompt, s2, 24, 1.0f, 7, 2);
  const auto b = client_->ok<SampleReply>(Op::sample, b_req, s2);
  const Frames fb = client_->last_frames;
  EXPECT_EQ(a.revision_id, saved.revision_id);
  ASSERT_EQ(a.sequences.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ints(a.sequences[i].tokens, fa), ints(b.sequences[i].tokens, fb));
    EXPECT_EQ(a.sequences[i].text, b.sequences[i].text);
  }

  // compute_logprobs on the saved revision equals the session's forward on the same tokens.
  const std::vector<int32_t> seq = data[0];
  Frames cf;
  ComputeLogprobsRequest clr{saved.address, add_tensor(cf, std::span<const int32_t>(seq))};
  const auto cl = client_->ok<ComputeLogprobsReply>(Op::compute_logprobs, clr, cf);
  const auto cl_values = floats(cl.logprobs, client_->last_frames);
  Frames ff;
  const auto fwd_req = fb_request(session.session_id, {seq}, ff);
  const auto fwd = client_->ok<ForwardBackwardReply>(Op::forward, fwd_req, ff);
  const auto fwd_values = floats(fwd.loss_fn_outputs.at(0).at(0).tensor, client_->last_frames);
  ASSERT_EQ(cl_values.size(), seq.size());
  ASSERT_EQ(fwd_values.size(), seq.size() - 1);
  EXPECT_TRUE(std::isnan(cl_values[0]));
  for (size_t i = 0; i + 1 < seq.size(); ++i) EXPECT_NEAR(cl_values[i + 1], fwd_values[i], 1e-4) << i;

  // A second revision, then the catalog operations.
  client_->ok<OptimStepReply>(Op::optim_step, OptimStepRequest{session.session_id, adam});
  const auto saved2 = client_->ok<SaveReply>(Op::save_state, SaveRequest{session.session_id, "second", "{\"reward\": 0.5}"});
  const auto list = client_->ok<PolicyListReply>(Op::catalog_list, CatalogListRequest{});
  ASSERT_EQ(list.policies.size(), 1u);
  EXPECT_EQ(list.policies[0].head, saved2.revision_id);
  const auto show = client_->ok<PolicyReply>(Op::catalog_show, AddressRequest{"spindle://local/tiny"});
  EXPECT_EQ(show.revision.id, saved2.revision_id);
  EXPECT_TRUE(show.revision.has_state);
  ASSERT_EQ(show.recent.size(), 2u);
  EXPECT_EQ(show.recent[1].id, saved.revision_id);
  const auto lineage = client_->ok<LineageReply>(Op::catalog_lineage, LineageRequest{saved.address, 10, 10});
  ASSERT_EQ(lineage.descendants.size(), 1u);
  EXPECT_EQ(lineage.descendants[0].revision.id, saved2.revision_id);
  const auto fork = client_->ok<PolicyReply>(Op::catalog_fork, ForkRequest{saved.address, "tiny-fork"});
  EXPECT_EQ(fork.policy.head, saved.revision_id);
  // A taken name is already_exists on the wire (a typed ErrorCode from the catalog up), as
  // PROTOCOL.md says, not invalid_argument.
  const auto again = client_->call(Op::catalog_fork, ForkRequest{saved.address, "tiny-fork"});
  EXPECT_EQ(again.error.code, errc::already_exists) << again.error.message;
  const auto tagged = client_->ok<PolicyReply>(Op::catalog_tag, TagRequest{"tiny", {"best"}, {}});
  EXPECT_EQ(tagged.policy.tags, std::vector<std::string>{"best"});
  const auto rolled = client_->ok<PolicyReply>(Op::catalog_rollback, AddressRequest{saved.address});
  EXPECT_EQ(rolled.policy.head, saved.revision_id);
  client_->ok<Empty>(Op::catalog_delete, AddressRequest{"tiny-fork"});
  const auto after = client_->ok<PolicyListReply>(Op::catalog_list, CatalogListRequest{});
  ASSERT_EQ(after.policies.size(), 1u);
  EXPECT_EQ(after.policies[0].name, "tiny");

  // PEFT round trip: export, import as a new policy; its greedy samples equal the original's.
  const auto exported = client_->ok<ExportPeftReply>(Op::export_peft, AddressRequest{saved2.address});
  EXPECT_EQ(exported.revision_id, saved2.revision_id);
  const std::string model_bytes(read_bytes(exported.adapter_model, client_->last_frames, "m"));
  Frames pf;
  ImportPeftRequest imp;
  imp.name = "imported";
  imp.adapter_config_json = exported.adapter_config_json;
  imp.adapter_model = add_bytes(pf, model_bytes);
  const auto imported = client_->ok<PolicyReply>(Op::import_peft, imp, pf);
  EXPECT_EQ(imported.policy.rank, 4);
  Frames g1, g2;
  const auto orig_req = sample_request(saved2.address, prompt, g1, 24, 0.0f, 0);
  const auto orig = client_->ok<SampleReply>(Op::sample, orig_req, g1);
  const auto orig_tokens = ints(orig.sequences[0].tokens, client_->last_frames);
  const auto imp_sample_req = sample_request("spindle://local/imported", prompt, g2, 24, 0.0f, 0);
  const auto imp_sample = client_->ok<SampleReply>(Op::sample, imp_sample_req, g2);
  EXPECT_EQ(ints(imp_sample.sequences[0].tokens, client_->last_frames), orig_tokens);

  // A session resumed from the saved state continues at its step.
  const auto resumed = client_->ok<TrainingSessionReply>(
      Op::create_training_from_state, CreateTrainingFromStateRequest{saved2.address});
  EXPECT_EQ(resumed.step, 3);
  client_->ok<Empty>(Op::close_training, SessionRequest{resumed.session_id});
  client_->ok<Empty>(Op::close_training, SessionRequest{session.session_id});
  const auto st = client_->ok<StatusReply>(Op::status, Empty{});
  EXPECT_EQ(st.training_sessions, 0u);
}

}  // namespace
}  // namespace spindle::testing
