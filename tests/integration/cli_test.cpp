// The `spindle` command line, run as a real process, in the exact forms the README and the
// issue give.

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include "run_spindle.h"
#include "shared_fixtures.h"
#include "spindle/adapters/peft.h"
#include "spindle/engine/loader.h"

namespace {

using spindle::testing::RunResult;
using spindle::testing::run_spindle;




std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Cli, GenerateGreedyFromBosMatchesLlama2cGolden) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  SPINDLE_SHARED_OR_SKIP(golden, "models/stories260K/golden/greedy_200steps_from_BOS.txt");
  const auto r = run_spindle({"generate", "--model", bin.string(), "--prompt", "",
                              "--max-tokens", "200", "--temperature", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, slurp(golden));
}

TEST(Cli, TokenizeMatchesGoldenAndDecodes) {
  SPINDLE_SHARED_OR_SKIP(tok, "models/stories260K/tok512.bin");
  SPINDLE_SHARED_OR_SKIP(golden, "models/stories260K/golden/encode_once_upon_a_time.txt");
  const auto r = run_spindle({"tokenize", "--tokenizer", tok.string(), "--text", "Once upon a time"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string want = slurp(golden);
  want = want.substr(0, want.find('\n'));
  std::string got = r.out;
  std::erase(got, ' ');
  std::erase(got, '\n');
  std::erase(want, ' ');
  EXPECT_EQ(got, want);
  const auto d = run_spindle({"tokenize", "--tokenizer", tok.string(), "--decode", "[403, 407, 261, 378]"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("Once upon a time"), std::string::npos) << d.out;
}

TEST(Cli, ConvertedModelGeneratesTheSameText) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const auto dir = std::filesystem::temp_directory_path() /
                   ("spindle_cli_convert_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto c = run_spindle({"convert", "--from", bin.string(), "--to", dir.string()});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_TRUE(c.out.empty());
  const std::vector<std::string> gen = {"--prompt", "Once upon a time", "--max-tokens", "60",
                                        "--temperature", "0.8", "--top-p", "0.9", "--seed", "7"};
  auto a_args = std::vector<std::string>{"generate", "--model", bin.string()};
  auto b_args = std::vector<std::string>{"generate", "--model", dir.string()};
  a_args.insert(a_args.end(), gen.begin(), gen.end());
  b_args.insert(b_args.end(), gen.begin(), gen.end());
  const auto a = run_spindle(a_args), b = run_spindle(b_args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_GT(a.out.size(), 20u);
  std::filesystem::remove_all(dir);
}

TEST(Cli, GenerateWithAdapterIsDeterministicAndDiffersFromBase) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const auto base = spindle::engine::load_llama2c(bin);
  const spindle::engine::LoraTarget t[] = {spindle::engine::LoraTarget::q,
                                           spindle::engine::LoraTarget::v,
                                           spindle::engine::LoraTarget::down};
  const auto adapter = spindle::engine::LoraWeights::random(base.config, 4, 16.0f, t, 9, 0.5f, 0.5f);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("spindle_cli_adapter_" + std::to_string(::getpid()));
  spindle::adapters::save_peft(adapter, dir, {.base_model_name_or_path = bin.string()});
  const std::vector<std::string> common = {"generate", "--model", bin.string(), "--prompt",
                                           "Once upon a time", "--max-tokens", "40",
                                           "--temperature", "0"};
  auto with = common;
  with.insert(with.end(), {"--adapter", dir.string()});
  const auto b = run_spindle(common), a1 = run_spindle(with), a2 = run_spindle(with);
  ASSERT_EQ(a1.exit_code, 0) << a1.err;
  EXPECT_EQ(a1.out, a2.out);
  EXPECT_NE(a1.out, b.out);
  std::filesystem::remove_all(dir);
}

TEST(Cli, BadInputGivesAClearErrorAndNonZeroExit) {
  const auto missing = run_spindle({"generate", "--model", "/nonexistent/model.bin", "--prompt",
                                    "x", "--max-tokens", "3"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("/nonexistent/model.bin"), std::string::npos) << missing.err;
  EXPECT_TRUE(missing.out.empty());
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const auto bad_adapter = run_spindle({"generate", "--model", bin.string(), "--adapter",
                                        "/nonexistent/adapter", "--prompt", "x", "--max-tokens", "3"});
  EXPECT_NE(bad_adapter.exit_code, 0);
  EXPECT_NE(bad_adapter.err.find("/nonexistent/adapter"), std::string::npos) << bad_adapter.err;
  const auto bad_p = run_spindle({"generate", "--model", bin.string(), "--prompt", "x",
                                  "--max-tokens", "3", "--top-p", "1.5"});
  EXPECT_NE(bad_p.exit_code, 0);
  EXPECT_NE(bad_p.err.find("top_p"), std::string::npos) << bad_p.err;
}

}  // namespace
