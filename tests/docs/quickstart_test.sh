#!/usr/bin/env bash
# Runs the ```sh quickstart-test block of docs/quickstart.md verbatim, so the quickstart stays
# true: bash -euo pipefail, a fresh temp SPINDLE_DATA_DIR, the build's binaries first on PATH.
#
# Usage: tests/docs/quickstart_test.sh APP_DIR
#   APP_DIR: the build's app/ folder (spindled, spindle, spindle-reward-host).
#   SPINDLE_SHARED_DIR (else SPINDLE_SHARED_DIR_DEFAULT, which ctest passes): the fixtures folder
#   holding models/stories260K. Exit 77 (ctest: skipped) when the fixture is absent.
# Exits with the block's status (124 when it runs past QUICKSTART_TIMEOUT_S, default 120 s).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
doc=$here/../../docs/quickstart.md
app=${1:?usage: quickstart_test.sh APP_DIR (the build\'s app/ folder)}
app=$(cd "$app" && pwd -P) || exit 2
for exe in spindled spindle; do
  [[ -x $app/$exe ]] || { echo "quickstart_test: no $exe in $app" >&2; exit 2; }
done

shared=${SPINDLE_SHARED_DIR:-${SPINDLE_SHARED_DIR_DEFAULT:-}}
model=$shared/models/stories260K/stories260K.bin
if [[ -z $shared || ! -f $model ]]; then
  echo "quickstart_test: skipped: the stories260K fixture ${shared:+($model) }is absent (set SPINDLE_SHARED_DIR)"
  exit 77
fi
export SPINDLE_SHARED_DIR=$(cd "$shared" && pwd)

# The block: from the line ```sh quickstart-test to the next ``` line (exactly one such block).
block=$(awk '
  /^```sh quickstart-test[[:space:]]*$/ { n++; inside = 1; next }
  inside && /^```[[:space:]]*$/ { inside = 0; next }
  inside { print }
  END { if (n != 1) { print "quickstart_test: expected one ```sh quickstart-test block, found " n > "/dev/stderr"; exit 1 } }
' "$doc") || exit 2
[[ -n $block ]] || { echo "quickstart_test: the quickstart-test block of $doc is empty" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spindle-quickstart.XXXXXX")
export SPINDLE_DATA_DIR=$tmp/data
mkdir -p "$SPINDLE_DATA_DIR" "$tmp/work"
unset SPINDLE_ENDPOINT SPINDLE_TOKEN XDG_DATA_HOME
export PATH=$app:$PATH
printf '%s\n' "$block" > "$tmp/block.sh"

# Leftover daemons of this data dir only: processes running this build's spindled whose
# environment names the data dir. (Matched by /proc/PID/exe, not by name: spindled re-execs
# itself through /proc/self/exe to set OMP_WAIT_POLICY, so its comm reads "exe".)
cleanup() {
  local pids=() pid dir exe
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    exe=$(readlink "$dir/exe" 2>/dev/null) || continue
    [[ ${exe% (deleted)} == "$app/spindled" ]] || continue  # (deleted): rebuilt meanwhile
    if tr '\0' '\n' < "$dir/environ" 2>/dev/null | grep -qxF "SPINDLE_DATA_DIR=$SPINDLE_DATA_DIR"; then
      pids+=("$pid")
    fi
  done
  if [[ ${#pids[@]} -gt 0 ]]; then
    echo "quickstart_test: stopping leftover spindled ${pids[*]}" >&2
    kill -TERM "${pids[@]}" 2>/dev/null
    for _ in $(seq 50); do
      kill -0 "${pids[@]}" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s.%N)
(cd "$tmp/work" && timeout "${QUICKSTART_TIMEOUT_S:-120}" bash -euo pipefail "$tmp/block.sh")
status=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [[ $status -eq 0 ]]; then
  echo "quickstart_test: ok (${elapsed} s)"
else
  echo "quickstart_test: FAILED: the quickstart-test block exited $status after ${elapsed} s" >&2
fi
exit $status
