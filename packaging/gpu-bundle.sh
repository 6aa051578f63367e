#!/usr/bin/env bash
# Packs the GPU test executables (and the device-neutral suites, run on CUDA) and the GPU bench
# into one self-contained folder for a CUDA
# machine that has the NVIDIA driver and CUDA 13 runtime libraries but none of Debian's:
#   BUILD/gpu-bundle/{bin,lib,shared,run.sh} and BUILD/gpu-bundle.tar.xz
# lib/ holds every non-system, non-CUDA shared library the executables load (from ldd);
# shared/ holds the stories260K fixture when SPINDLE_SHARED_DIR (default ../shared) has it.
# On the GPU machine: tar xf gpu-bundle.tar.xz && gpu-bundle/run.sh [OUT_DIR]
# (SPINDLE_GPU_BENCH=0 skips the GPU bench; SPINDLE_SERVICE_BENCH=1 adds the daemon benches).
set -euo pipefail
build=${1:-build/default}
shared=${SPINDLE_SHARED_DIR:-$(cd "$(dirname "$0")/.." && pwd)/../shared}
dest=$build/gpu-bundle
rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib"

# test_gpu_*: the CUDA engine's own suites. test_backend, test_scheduler and test_device_daemon:
# the device-neutral suites (one body per behaviour, every backend), run here with
# SPINDLE_TEST_DEVICE=cuda; test_device_daemon starts app/spindled --device cuda (issue 13's
# service tests). spindle-bench: the daemon benches with --device cuda, the live MoE adapter
# load into a device slot (residency --live-only: packed_live_speedup) and MoE decode
# (spindle-bench-gpu --arch qwen3_moe) (SPINDLE_SERVICE_BENCH=1).
mapfile -t exes < <(find "$build/tests" -maxdepth 3 -type f -perm -u+x \
                      \( -name 'test_gpu_*' -o -name 'spindle-bench-gpu' -o -name test_backend \
                         -o -name test_scheduler -o -name test_device_daemon \
                         -o -name spindle-bench \) | sort)
[[ ${#exes[@]} -gt 0 ]] || { echo "gpu-bundle: no test_gpu_* executables under $build" >&2; exit 1; }
cp "${exes[@]}" "$dest/bin/"
cp "$(dirname "$0")/../tests/bench/gpu.sh" "$dest/bin/" 2>/dev/null || true
# The daemon and its reward host where the tests look for them (SPINDLE_BINARY_DIR/app), and
# the built-in reward plugins.
mkdir -p "$dest/app" "$dest/plugins"
for app in spindled spindle-reward-host; do
  [[ -x $build/app/$app ]] && cp "$build/app/$app" "$dest/app/" && exes+=("$build/app/$app")
done
cp "$build"/plugins/*.so "$dest/plugins/" 2>/dev/null || true

# System libraries (glibc, libstdc++, libgcc) exist on any Linux; CUDA's come with the driver
# machine's toolkit. Everything else travels.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libnccl|libcurand)'
for exe in "${exes[@]}"; do
  ldd "$exe" | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] || cp -L "$path" "$dest/lib/$name"
done

if [[ -d $shared/models/stories260K ]]; then
  mkdir -p "$dest/shared/models"
  cp -r "$shared/models/stories260K" "$dest/shared/models/"
fi

cat > "$dest/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test executable (gtest XML + logs into OUT_DIR) and then the GPU bench.
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
mkdir -p "$out"
nccl=$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$here/lib:/usr/local/cuda/lib64:${nccl:+$(dirname "$nccl"):}${LD_LIBRARY_PATH:-}
export SPINDLE_SHARED_DIR=$here/shared
export SPINDLE_BINARY_DIR=$here SPINDLE_REWARD_PLUGIN_PATH=$here/plugins
export SPINDLE_REWARD_HOST=$here/app/spindle-reward-host
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# Whether this machine offers cuDNN (fused attention on tensor cores; too large to carry).
cudnn=$( (ldconfig -p 2>/dev/null | grep -o '/.*libcudnn\.so\.9.*'; ls /usr/local/cuda*/lib64/libcudnn.so.9* 2>/dev/null) | head -1)
echo "cudnn: ${cudnn:-none}"
status=0
# One test executable: gtest XML and log into $out, the log's tail on stdout.
run_suite() {
  local t=$1 name
  name=$(basename "$t")
  SPINDLE_TEST_DEVICE=cuda timeout "${SPINDLE_GPU_TEST_TIMEOUT:-240}" "$t" \
    --gtest_output="xml:$out/$name.xml" --gtest_brief=1 >"$out/$name.log" 2>&1
  local rc=$?
  echo "=== $name (rc $rc)"
  tail -n 25 "$out/$name.log"
  return $rc
}
export -f run_suite
export out
# The CUDA engine's own suites share the device SPINDLE_GPU_TEST_JOBS at a time (they time
# nothing); the device-neutral suites start daemons and run one after another.
start=$SECONDS
printf '%s\n' "$here"/bin/test_gpu_* |
  xargs -P "${SPINDLE_GPU_TEST_JOBS:-4}" -I{} bash -c 'run_suite "$1"' _ {} || status=1
for t in "$here"/bin/test_backend "$here"/bin/test_scheduler "$here"/bin/test_device_daemon; do
  [[ -x $t ]] || continue
  run_suite "$t" || status=1
done
# One line per suite from its XML: tests, failures, errors, skipped, seconds; then failed tests.
{
  echo "suites finished in $((SECONDS - start)) s"
  for x in "$out"/*.xml; do
    [[ -f $x ]] || continue
    head -n 3 "$x" | grep -o '<testsuites[^>]*' |
      sed -E 's/.*tests="([0-9]+)".*failures="([0-9]+)".*disabled="([0-9]+)".*errors="([0-9]+)".*time="([0-9.]+)".*/\1 tests \2 failed \4 errors \5 s/' |
      sed "s|^|$(basename "$x" .xml): |"
    echo "  skipped: $(grep -c '<skipped' "$x")"
    grep -B1 '<failure' "$x" | grep -o 'testcase name="[^"]*"[^>]*classname="[^"]*"' |
      sed -E 's/testcase name="([^"]*)".*classname="([^"]*)"/  FAILED \2.\1/'
  done
} | tee "$out/summary.txt"
if [[ -x $here/bin/spindle-bench-gpu && ${SPINDLE_GPU_BENCH:-1} == 1 ]]; then
  echo "=== spindle-bench-gpu"
  PATH=$here/bin:$PATH timeout "${SPINDLE_GPU_BENCH_TIMEOUT:-360}" \
    bash "$here/bin/gpu.sh" 2>&1 | tee "$out/bench.log" || status=1
fi
if [[ -x $here/bin/spindle-bench && ${SPINDLE_SERVICE_BENCH:-0} == 1 ]]; then
  bench() {
    echo "=== spindle-bench $*"
    timeout "${SPINDLE_SERVICE_BENCH_TIMEOUT:-300}" "$here/bin/spindle-bench" "$@" 2>&1 |
      tee -a "$out/service_bench.log" || status=1
  }
  daemon=(--device cuda --spindled "$here/app/spindled" --shared "$here/shared")
  bench service --only zipf "${daemon[@]}"
  bench service --only handoff --shapes 0.6b,4b "${daemon[@]}"
  bench grpo --device cuda --shared "$here/shared"
  bench residency --live-only --device cuda --repeats 2
  if [[ -x $here/bin/spindle-bench-gpu ]]; then
    echo "=== spindle-bench-gpu --arch qwen3_moe"
    timeout "${SPINDLE_SERVICE_BENCH_TIMEOUT:-300}" "$here/bin/spindle-bench-gpu" --arch qwen3_moe \
      2>&1 | tee -a "$out/service_bench.log" || status=1
  fi
fi
exit $status
RUN
chmod +x "$dest/run.sh"
tar -C "$build" -cJf "$build/gpu-bundle.tar.xz" gpu-bundle
du -sh "$dest" "$build/gpu-bundle.tar.xz"
