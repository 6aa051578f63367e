// `spindle sft` and `spindle make-base` run as real processes, in the forms the README gives:
// the loss falls, the adapter loads and serves, --init resumes the optimizer, bad data names the
// line, and a made base generates. No accuracy is asserted (time-boxed training is noisy).

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <sys/wait.h>

#include "run_spindle.h"
#include "shared_fixtures.h"
#include "spindle/adapters/optimizer_state.h"
#include "spindle/adapters/peft.h"
#include "spindle/engine/loader.h"

namespace {

using spindle::testing::RunResult;
using spindle::testing::run_spindle;

namespace fs = std::filesystem;




fs::path temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("spindle_train_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// Per-step losses from "step i/n loss X tokens T" lines; checks the numbering.
std::vector<double> step_losses(const std::string& out, int n_steps) {
  static const std::regex line(R"(step (\d+)/(\d+) loss ([0-9.]+) tokens (\d+))");
  std::vector<double> losses;
  std::istringstream in(out);
  for (std::string s; std::getline(in, s);) {
    std::smatch m;
    if (!std::regex_match(s, m, line)) continue;
    EXPECT_EQ(std::stoi(m[1]), int(losses.size()) + 1) << s;
    EXPECT_EQ(std::stoi(m[2]), n_steps) << s;
    EXPECT_GT(std::stoi(m[4]), 0) << s;
    losses.push_back(std::stod(m[3]));
  }
  EXPECT_EQ(int(losses.size()), n_steps) << out;
  return losses;
}

const char* kStories[][2] = {
    {"Once upon a time", " there was a little girl named Lily. She loved to play outside."},
    {"One day, a big dog", " ran to the park. The dog was happy and wanted to play."},
    {"Tom had a red ball.", " He threw the ball to his friend Sam and they laughed."},
    {"The sun was hot.", " Mom gave Lily a cold drink and a big hug."},
    {"A little bird", " sang a song in the tree. The bird was very happy."},
    {"Ben saw a cat.", " The cat was small and soft. Ben gave the cat some milk."},
};

std::string story_rows() {
  std::string s;
  for (const auto& r : kStories) {
    s += std::string("{\"prompt\": \"") + r[0] + "\", \"completion\": \"" + r[1] + "\"}\n";
  }
  return s;
}

TEST(TrainCli, SftLowersTheLossSavesServesAndResumes) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const fs::path dir = temp_dir("sft");
  write(dir / "data.jsonl", story_rows());
  const fs::path out = dir / "adapter";
  const auto r = run_spindle({"sft", "--model", bin.string(), "--data", (dir / "data.jsonl").string(),
                              "--rank", "8", "--steps", "30", "--lr", "1e-2", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto losses = step_losses(r.out, 30);
  ASSERT_EQ(losses.size(), 30u);
  EXPECT_LT(losses.back(), 0.6 * losses.front()) << r.out;

  const auto base = spindle::engine::load_llama2c(bin);
  const auto adapter = spindle::adapters::load_peft(out, base.config);
  EXPECT_EQ(adapter.rank, 8);
  EXPECT_EQ(adapter.alpha, 8.0f);  // default alpha = rank
  EXPECT_EQ(spindle::adapters::adapted_targets(adapter).size(), 7u);
  EXPECT_EQ(spindle::adapters::load_optimizer_state(out).step_count(), 30);

  const std::vector<std::string> gen = {"generate", "--model", bin.string(), "--prompt",
                                        "Once upon a time", "--max-tokens", "20",
                                        "--temperature", "0"};
  auto with = gen;
  with.insert(with.end(), {"--adapter", out.string()});
  const auto g = run_spindle(with), b = run_spindle(gen);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_GT(g.out.size(), 5u);
  EXPECT_NE(g.out, b.out);

  // --init continues the adapter and its optimizer (step count 30 -> 33), from a lower loss.
  const fs::path out2 = dir / "resumed";
  const auto c = run_spindle({"sft", "--model", bin.string(), "--data", (dir / "data.jsonl").string(),
                              "--init", out.string(), "--steps", "3", "--lr", "1e-2", "--out",
                              out2.string()});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const auto resumed = step_losses(c.out, 3);
  ASSERT_FALSE(resumed.empty());
  EXPECT_LT(resumed.front(), 0.6 * losses.front()) << c.out;
  EXPECT_EQ(spindle::adapters::load_optimizer_state(out2).step_count(), 33);
  EXPECT_EQ(spindle::adapters::load_peft(out2, base.config).rank, 8);

  const auto clash = run_spindle({"sft", "--model", bin.string(), "--data",
                                  (dir / "data.jsonl").string(), "--init", out.string(), "--rank",
                                  "4", "--steps", "1", "--lr", "1e-2", "--out", out2.string()});
  EXPECT_NE(clash.exit_code, 0);
  EXPECT_NE(clash.err.find("--rank 4"), std::string::npos) << clash.err;
  fs::remove_all(dir);
}

TEST(TrainCli, SftTakesTokenRowsAndNamesBadLines) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const fs::path dir = temp_dir("tokens");
  write(dir / "tokens.jsonl",
        "{\"input_tokens\": [1, 403, 407, 261], \"target_tokens\": [403, 407, 261, 378]}\n"
        "{\"input_tokens\": [1, 403], \"target_tokens\": [403, 407], \"weights\": [0, 1]}\n");
  const fs::path out = dir / "adapter";
  const auto r = run_spindle({"sft", "--model", bin.string(), "--data",
                              (dir / "tokens.jsonl").string(), "--rank", "2", "--alpha", "4",
                              "--targets", "q,v,lm_head", "--steps", "4", "--batch", "2", "--lr",
                              "1e-3", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(step_losses(r.out, 4).size(), 4u);
  const auto adapter = spindle::adapters::load_peft(out, spindle::engine::load_llama2c(bin).config);
  EXPECT_EQ(adapter.alpha, 4.0f);
  EXPECT_EQ(spindle::adapters::adapted_targets(adapter).size(), 3u);

  write(dir / "bad.jsonl", story_rows().substr(0, story_rows().find('\n') + 1) +
                               "{\"prompt\": \"Once\", \"completion\": 7}\n");
  const auto bad = run_spindle({"sft", "--model", bin.string(), "--data",
                                (dir / "bad.jsonl").string(), "--rank", "2", "--steps", "1",
                                "--lr", "1e-3", "--out", (dir / "never").string()});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("bad.jsonl:2"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("completion"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir / "never"));

  write(dir / "empty.jsonl", "\n");
  const auto empty = run_spindle({"sft", "--model", bin.string(), "--data",
                                  (dir / "empty.jsonl").string(), "--rank", "2", "--steps", "1",
                                  "--lr", "1e-3", "--out", (dir / "never").string()});
  EXPECT_NE(empty.exit_code, 0);
  EXPECT_NE(empty.err.find("no training rows"), std::string::npos) << empty.err;
  fs::remove_all(dir);
}

TEST(TrainCli, MakeBaseWritesAModelThatGenerates) {
  const fs::path dir = temp_dir("make_base");
  const fs::path out = dir / "arith";
  const auto m = run_spindle({"make-base", "--task", "arithmetic", "--out", out.string(),
                              "--minutes", "0.2"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.out.find("accuracy"), std::string::npos) << m.out;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) {
    EXPECT_TRUE(fs::exists(out / f)) << f;
  }
  const auto g = run_spindle({"generate", "--model", out.string(), "--prompt", "12+34=",
                              "--max-tokens", "4", "--temperature", "0"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_FALSE(g.out.empty());
  fs::remove_all(dir);
}

}  // namespace
