// libFuzzer entry point for the JSON a client sends in run_start and reward_test: the GRPO run
// config (rl::parse_run_config, which holds a reward spec) and the reward spec alone
// (rewards::RewardSpec::parse). spindle::Error is the only allowed failure; any other
// exception escapes (the fuzzer reports it). What parses must write itself back (to_json) as
// JSON that parses to the same text: the daemon stores that text in the catalog and parses it
// again on resume.

#include <cstdint>
#include <cstdlib>
#include <string>

#include "spindle/core/error.h"
#include "spindle/rewards/rewards.h"
#include "spindle/rl/config.h"

namespace {

template <class Parse>
void check_round_trip(const std::string& text, Parse parse) {
  std::string once;
  try {
    once = parse(text).to_json();
  } catch (const spindle::Error& e) {
    if (e.code() == spindle::ErrorCode::internal) std::abort();  // a broken invariant is a bug
    return;
  }
  // Stored text must parse again (a resume must not fail where the start succeeded) and be a
  // fixed point.
  if (parse(once).to_json() != once) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_round_trip(text, [](const std::string& t) { return spindle::rl::parse_run_config(t, "fuzz-input"); });
  check_round_trip(text, [](const std::string& t) {
    return spindle::rewards::RewardSpec::parse(t, "fuzz-input");
  });
  return 0;
}
