// Policy user_metadata (Tinker's ServiceClient(user_metadata=...)) and Hugging Face style base
// ids ("Qwen/Qwen3-0.6B"): stored and returned as given, copied by fork, validated with the
// field or id named.

#include <gtest/gtest.h>

#include "catalog_fixture.h"

namespace spindle::catalog::testing {
namespace {

class UserMetadataTest : public CatalogTest {};

TEST_F(UserMetadataTest, RoundTripListAndForkCopies) {
  PolicySpec s = spec("with-meta");
  s.user_metadata_json = R"({"run": "sl-loop", "owner": {"name": "ada"}, "n": 3})";
  const Policy created = cat_->create_policy("acme", s, "t");
  EXPECT_EQ(created.user_metadata_json, s.user_metadata_json);  // stored as given
  EXPECT_EQ(cat_->get_policy("acme", "with-meta").user_metadata_json, s.user_metadata_json);
  const Revision r = commit("acme", "with-meta", 1);
  EXPECT_EQ(cat_->get("acme", addr("acme", "with-meta")).policy.user_metadata_json,
            s.user_metadata_json);
  const auto page = cat_->list("acme", {});
  ASSERT_EQ(page.items.size(), 1u);
  EXPECT_EQ(page.items[0].user_metadata_json, s.user_metadata_json);

  const Policy fork = cat_->fork("acme", addr("acme", "with-meta", r.id), "forked", "t");
  EXPECT_EQ(fork.user_metadata_json, s.user_metadata_json);
  EXPECT_EQ(cat_->get_policy("acme", "forked").user_metadata_json, s.user_metadata_json);

  // None given: "".
  EXPECT_EQ(cat_->create_policy("acme", spec("plain"), "t").user_metadata_json, "");
}

TEST_F(UserMetadataTest, InvalidOrTooLargeIsRefusedNamingTheField) {
  for (const std::string bad : {"{", "[1, 2]", "\"text\"", "42", "{\"a\": }"}) {
    PolicySpec s = spec("bad");
    s.user_metadata_json = bad;
    const Caught err = catch_error([&] { cat_->create_policy("acme", s, "t"); });
    EXPECT_EQ(err.code, ErrorCode::invalid_argument) << bad;
    EXPECT_NE(err.message.find("user_metadata"), std::string::npos) << err.message;
  }
  // At most 16384 bytes: exactly that is fine, one more is not.
  const std::string head = R"({"k": ")", tail = "\"}";
  PolicySpec fits = spec("fits");
  fits.user_metadata_json = head + std::string(16384 - head.size() - tail.size(), 'x') + tail;
  ASSERT_EQ(fits.user_metadata_json.size(), 16384u);
  EXPECT_EQ(cat_->create_policy("acme", fits, "t").user_metadata_json, fits.user_metadata_json);
  PolicySpec big = spec("big");
  big.user_metadata_json = head + std::string(16385 - head.size() - tail.size(), 'x') + tail;
  const Caught err = catch_error([&] { cat_->create_policy("acme", big, "t"); });
  EXPECT_EQ(err.code, ErrorCode::invalid_argument);
  EXPECT_NE(err.message.find("user_metadata"), std::string::npos) << err.message;
  EXPECT_NE(err.message.find("16384"), std::string::npos) << err.message;
  EXPECT_EQ(cat_->list("acme", {}).items.size(), 1u);  // only "fits"
}

class BaseIdTest : public CatalogTest {};

TEST_F(BaseIdTest, HuggingFaceIdsRegisterListAndFilter) {
  const BaseModel qwen{.id = "Qwen/Qwen3-0.6B", .arch = "qwen3", .path = "/m/q", .checksum = "ab"};
  cat_->register_base(qwen, "op");
  cat_->register_base(qwen, "op");  // idempotent
  cat_->register_base({.id = "org/team/model.v2_x", .arch = "llama"}, "op");
  EXPECT_EQ(cat_->get_base("Qwen/Qwen3-0.6B").path, "/m/q");
  std::vector<std::string> ids;
  for (const auto& b : cat_->list_bases()) ids.push_back(b.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"Qwen/Qwen3-0.6B", "org/team/model.v2_x", "tiny"}));

  PolicySpec on_qwen = spec("qwen-lora");
  on_qwen.base_id = "Qwen/Qwen3-0.6B";
  EXPECT_EQ(cat_->create_policy("acme", on_qwen, "t").base_id, "Qwen/Qwen3-0.6B");
  cat_->create_policy("acme", spec("tiny-lora"), "t");
  ListQuery q;
  q.base_id = "Qwen/Qwen3-0.6B";
  const auto page = cat_->list("acme", q);
  ASSERT_EQ(page.items.size(), 1u);
  EXPECT_EQ(page.items[0].name, "qwen-lora");
  q.base_id = "Qwen";
  EXPECT_TRUE(cat_->list("acme", q).items.empty());
  // Policy names and tenants stay single names.
  EXPECT_EQ(catch_error([&] { cat_->create_policy("acme", spec("a/b"), "t"); }).code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(catch_error([&] { cat_->create_policy("ac/me", spec("p"), "t"); }).code,
            ErrorCode::invalid_argument);
}

TEST_F(BaseIdTest, MalformedIdsAreRefusedNamingTheId) {
  const std::string long_id = std::string(64, 'a') + "/" + std::string(64, 'b');  // 129
  for (const std::string& bad :
       std::vector<std::string>{"/x", "a//b", "a/", "", "/", "a/-b", "a/b c", "a@b/c", long_id}) {
    const Caught reg =
        catch_error([&] { cat_->register_base({.id = bad, .arch = "qwen3"}, "op"); });
    EXPECT_EQ(reg.code, ErrorCode::invalid_argument) << bad;
    EXPECT_NE(reg.message.find("'" + bad + "'"), std::string::npos) << reg.message;
    EXPECT_EQ(catch_error([&] { check_base_id(bad); }).code, ErrorCode::invalid_argument);
    ListQuery q;
    q.base_id = bad;
    EXPECT_EQ(catch_error([&] { cat_->list("acme", q); }).code, ErrorCode::invalid_argument);
    PolicySpec s = spec("p");
    s.base_id = bad;
    EXPECT_EQ(catch_error([&] { cat_->create_policy("acme", s, "t"); }).code,
              ErrorCode::invalid_argument);
  }
  EXPECT_NE(catch_error([&] { check_base_id("a//b"); }).message.find("empty"), std::string::npos);
  EXPECT_NO_THROW(check_base_id(std::string(128, 'a')));
  EXPECT_NO_THROW(check_base_id("Qwen/Qwen3-0.6B"));
}

}  // namespace
}  // namespace spindle::catalog::testing
