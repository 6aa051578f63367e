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
# UBSan reports without stopping (the fuzz build recovers); a report located anywhere but in
# Debian's rapidjson headers fails the run below. ASan findings stop libFuzzer as usual.
export UBSAN_OPTIONS="print_stacktrace=1:suppressions=$PWD/tests/fuzz/ubsan.supp"
third_party='^/usr/include/rapidjson/'
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
  ub_ours=$(grep 'runtime error:' "$findings/$t.log" | grep -Ev "$third_party" || true)
  ub_theirs=$(grep 'runtime error:' "$findings/$t.log" | grep -Ec "$third_party" || true)
  printf 'fuzz %-15s executions %9s  seconds %6.0f  corpus %4d -> %4d  rapidjson UB reports %s\n' \
    "$t" "$execs" "$secs" "$before" "$after" "$ub_theirs"
  if [ -n "$ub_ours" ]; then
    echo "undefined behaviour outside third-party headers ($findings/$t.log):"
    echo "$ub_ours"
    exit 1
  fi
done
