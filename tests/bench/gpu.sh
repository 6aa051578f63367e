#!/usr/bin/env bash
# The GPU bench of issue 6: runs spindle-bench-gpu on device 0 and prints its figures and
# ratios (gpu_decode/bandwidth_bound, gpu_hetero/single, sgmv/base_gemm, LoRA training
# tokens/s). Finishes within 6 minutes on one H200 (hard limit: 360 s).
#
# Usage: tests/bench/gpu.sh [BINARY] [-- spindle-bench-gpu args, e.g. --quick]
#   BINARY defaults to a spindle-bench-gpu beside this script (packaging/gpu-bundle.sh puts it
#   there), else one on PATH, else build/default/tests/bench/spindle-bench-gpu in the repository.
#   SPINDLE_BENCH_LIBS=DIR puts DIR first on LD_LIBRARY_PATH: a bare GPU machine lacks Debian's
#   libfmt, libopenblas (OpenMP variant), libgfortran, libquadmath and libgomp; copy the ones
#   `ldd BINARY` resolves outside /usr/local/cuda into DIR on the build machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ -x $here/spindle-bench-gpu ]]; then
  bin=$here/spindle-bench-gpu
elif command -v spindle-bench-gpu >/dev/null; then
  bin=$(command -v spindle-bench-gpu)
else
  bin=$here/../../build/default/tests/bench/spindle-bench-gpu  # the default preset's build
fi
if [[ $# -gt 0 && $1 != -- ]]; then
  bin=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
if [[ ! -x $bin ]]; then
  echo "gpu.sh: no spindle-bench-gpu at $bin (configure with -DSPINDLE_WITH_CUDA=ON and build" \
       "the spindle_bench_gpu target)" >&2
  exit 2
fi
if [[ -n ${SPINDLE_BENCH_LIBS:-} ]]; then
  export LD_LIBRARY_PATH="$SPINDLE_BENCH_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
exec timeout 360 "$bin" "$@"
