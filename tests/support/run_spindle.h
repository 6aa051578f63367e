#pragma once
// Runs the built `spindle` CLI as a real process, capturing its exit code, stdout and stderr.

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shared_fixtures.h"

namespace spindle::testing {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `env_prefix` ("NAME=value ...") is put before the command as the shell reads it.
inline RunResult run_spindle(const std::vector<std::string>& args,
                             const std::string& env_prefix = "") {
  static std::atomic<int> counter{0};
  const auto err_file = std::filesystem::temp_directory_path() /
                        ("spindle_cli_err_" + std::to_string(::getpid()) + "_" +
                         std::to_string(counter++));
  std::string cmd = env_prefix + " " + shell_quote((binary_dir() / "app" / "spindle").string());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>" + shell_quote(err_file.string());
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_file);
  return r;
}

}  // namespace spindle::testing
