#!/usr/bin/env bash
# Runs every libFuzzer target for RUNS executions (default 1 000 000) and merges the inputs that
# add coverage into its corpus in the repo (tests/fuzz/corpus/<target>/), which CI replays.
# Needs the `fuzz` preset's build (Clang, libFuzzer, ASan+UBSan):
#   cmake --preset fuzz && cmake --build --preset fuzz && tests/fuzz/run.sh [RUNS] [TARGET...]
# Prints one line per target: executions, seconds, corpus size before and after. A crash stops
# the script with libFuzzer's report and leaves the reproducer (crash-*) in build/fuzz/findings.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-1000000}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors protocol tokenizer_json run_config)
bin=build/fuzz/tests/fuzz
findings=build/fuzz/findings
# Halt on any UBSan report that tests/fuzz/ubsan.supp does not name (third-party headers only).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/tests/fuzz/ubsan.supp"
mkdir -p "$findings"
if [ ! -e tests/fuzz/corpus/protocol/seed0 ] && [ -x build/default/tests/fuzz/fuzz_protocol_corpus ]; then
  mkdir -p tests/fuzz/corpus/protocol
  build/default/tests/fuzz/fuzz_protocol_corpus --seeds tests/fuzz/corpus/protocol
fi
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus/$t
  work=$findings/$t-new
  rm -rf "$work" && mkdir -p "$work"
  before=$(ls "$corpus" | wc -l)
  start=$(date +%s.%N)
  # -jobs/-workers stay 1 (2 cores here); -max_len covers a tokenizer.json seed.
  "$bin/fuzz_$t" -runs="$runs" -max_len=16384 -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix="$findings/$t-" -print_final_stats=1 "$work" "$corpus" \
    > "$findings/$t.log" 2>&1 || { tail -60 "$findings/$t.log"; exit 1; }
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$findings/$t.log" | grep -o '[0-9]*$')
  "$bin/fuzz_$t" -merge=1 -max_len=16384 "$corpus" "$work" > "$findings/$t-merge.log" 2>&1
  after=$(ls "$corpus" | wc -l)
  printf 'fuzz %-15s executions %9s  seconds %6.0f  corpus %4d -> %4d\n' "$t" "$execs" "$secs" "$before" "$after"
done
