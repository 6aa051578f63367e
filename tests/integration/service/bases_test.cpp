// Several bases in one spindled: each --model with its own id (ids with '/'), all listed by
// capabilities and status, requests routed by base, unknown bases named, duplicate ids and an
// exceeded memory budget refused at start-up with the reason.

#include "daemon.h"
#include "spindle/engine/tokenizer.h"

namespace spindle::testing {
namespace {

using namespace protocol;

std::vector<int32_t> encode(const std::string& text) {
  const auto tok = engine::load_tokenizer(stories_model().parent_path() / "tok512.bin");
  return tok->encode(text);
}

// The start-up error of a daemon that must refuse these arguments.
std::string refusal(const std::vector<std::string>& args) {
  try {
    SpindledProcess p(binary_dir() / "app" / "spindled", fresh_dir("bases_refused"), args, 60);
    p.terminate();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Bases, TwoBasesServedAndRoutedById) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  // The same weights twice, under two ids: the second a hub-style id with '/'.
  Daemon d(fresh_dir("bases"), {"--base-id", "stories-a", "--model", stories_model().string(),
                                "--base-id", "org/stories-b", "--kv-blocks", "256"});
  RawClient c(d.ipc(), d.token());
  const auto caps = c.ok<CapabilitiesReply>(Op::capabilities, Empty{});
  ASSERT_EQ(caps.bases.size(), 2u);
  EXPECT_EQ(caps.bases[0].id, "stories-a");
  EXPECT_EQ(caps.bases[1].id, "org/stories-b");
  const auto status = c.ok<StatusReply>(Op::status, Empty{});
  ASSERT_EQ(status.bases.size(), 2u);
  EXPECT_EQ(status.bases[1].id, "org/stories-b");
  EXPECT_EQ(status.kv_bytes, status.bases[0].kv_bytes + status.bases[1].kv_bytes);

  // Greedy samples of the bare bases: same weights, same tokens, each base answering.
  const std::vector<int32_t> prompt = encode("Once upon a time");
  std::vector<std::vector<int32_t>> outs;
  for (const std::string id : {"stories-a", "org/stories-b"}) {
    Frames f;
    const auto req = sample_request(id, prompt, f, 12, 0.0f, 1);
    const auto r = c.ok<SampleReply>(Op::sample, req, f);
    outs.push_back(read_int32(r.sequences.at(0).tokens, c.last_frames, "tokens"));
  }
  EXPECT_EQ(outs[0], outs[1]);

  // A policy on the second base trains there and serves from there.
  CreateTrainingRequest create;
  create.base_model = "org/stories-b";
  create.policy = "on-b";
  create.rank = 4;
  create.alpha = 8;
  create.seed = 2;
  const auto s = c.ok<TrainingSessionReply>(Op::create_training, create);
  EXPECT_EQ(s.base_model, "org/stories-b");
  const auto saved = c.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "", ""});
  const auto shown = c.ok<PolicyReply>(Op::catalog_show, AddressRequest{saved.address});
  EXPECT_EQ(shown.policy.base_id, "org/stories-b");
  Frames f;
  const auto req = sample_request(saved.address, prompt, f, 4, 0.0f, 1);
  EXPECT_EQ(c.ok<SampleReply>(Op::sample, req, f).revision_id, saved.revision_id);
  const auto after = c.ok<StatusReply>(Op::status, Empty{});
  EXPECT_EQ(after.bases[0].training_sessions, 0u);
  EXPECT_EQ(after.bases[1].training_sessions, 1u);
  CatalogListRequest by_base;
  by_base.base_id = "org/stories-b";
  const auto listed = c.ok<PolicyListReply>(Op::catalog_list, by_base);
  ASSERT_EQ(listed.policies.size(), 1u);
  EXPECT_EQ(listed.policies[0].name, "on-b");

  // The policy deleted and re-created on the other base while its session is open: the
  // session's save refuses to commit weights trained on org/stories-b into it.
  c.ok<Empty>(Op::catalog_delete, AddressRequest{saved.address.substr(0, saved.address.find('@'))});
  CreateTrainingRequest again = create;
  again.base_model = "stories-a";
  c.ok<TrainingSessionReply>(Op::create_training, again);
  const Reply moved = c.call(Op::save_weights, SaveRequest{s.session_id, "", ""});
  ASSERT_FALSE(moved.ok);
  EXPECT_EQ(moved.error.code, errc::failed_precondition);
  EXPECT_NE(moved.error.message.find("is on base 'stories-a', not 'org/stories-b'"),
            std::string::npos)
      << moved.error.message;

  // Unknown bases are not_found naming what is served.
  create.base_model = "Qwen/Qwen3-0.6B";
  const Reply unknown = c.call(Op::create_training, create);
  ASSERT_FALSE(unknown.ok);
  EXPECT_EQ(unknown.error.code, errc::not_found);
  EXPECT_NE(unknown.error.message.find("served: 'stories-a', 'org/stories-b'"), std::string::npos)
      << unknown.error.message;
  Frames g;
  const auto bad = sample_request("nope/base", prompt, g, 4, 0.0f, 1);
  const Reply r = c.call(Op::sample, bad, g);
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.code, errc::not_found);
  EXPECT_EQ(d.terminate(), 0);
}

TEST(Bases, DuplicateIdsAndAnExceededBudgetAreRefusedAtStart) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  const std::string model = stories_model().string();
  const std::string dup = refusal({"--model", model, "--model", model});
  EXPECT_NE(dup.find("two bases have the id 'stories260K'"), std::string::npos) << dup;
  const std::string budget = refusal({"--model", model, "--memory-budget-mib", "1"});
  EXPECT_NE(budget.find("over --memory-budget-mib 1"), std::string::npos) << budget;
  const std::string pairs = refusal({"--model", model, "--base-id", "a", "--base-id", "b"});
  EXPECT_NE(pairs.find("2 --base-id values for 1 --model"), std::string::npos) << pairs;
  const std::string bad_id = refusal({"--model", model, "--base-id", "a//b"});
  EXPECT_NE(bad_id.find("a//b"), std::string::npos) << bad_id;
}

TEST(Bases, ACatalogCacheBelowOneMibIsRefusedAtStart) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  const std::string r = refusal({"--model", stories_model().string(), "--catalog-cache-mib", "0"});
  EXPECT_NE(r.find("--catalog-cache-mib must be at least 1, got 0"), std::string::npos) << r;
}

}  // namespace
}  // namespace spindle::testing
