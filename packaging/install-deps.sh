#!/usr/bin/env bash
# Installs everything Spindle's build and tests need on Debian 12 (run as root).
# Idempotent: packages already present are left alone; apt only.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-openmp-dev libpcre2-dev libicu-dev nlohmann-json3-dev libspdlog-dev libcli11-dev
  libsqlite3-dev libssl-dev libzmq3-dev cppzmq-dev libcereal-dev libcpp-httplib-dev
  # Data-parallel training of one policy across CPU workers (Gloo ring all-reduce over TCP).
  libgloo-dev
  python3 python3-numpy python3-zmq python3-pytest
  # The Tinker drop-in tests: TensorData.from_torch, forward_backward_custom (autograd) and chat
  # templates rendered as transformers does (jinja2's sandbox). The SDK itself needs neither.
  python3-torch python3-jinja2
  # Spindle Studio (Qt 6.4 Widgets + Charts, Dear ImGui 1.86 with its OpenGL 3 backend) and a
  # real X server for its screenshot test; fonts so text renders under Xvfb.
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl-dev libimgui-dev xvfb xauth
  fonts-dejavu-core
  # Debian packages (CPack DEB): man pages from --help, shlibdeps, the lintian check, the
  # systemd unit check, and pip for the offline `pip install protocol/python` check.
  help2man dpkg-dev lintian systemd man-db python3-pip python3-setuptools
  # The Slurm launch test (tests/python/test_slurm.py): a single-node Slurm cluster, started by
  # the test in a temp dir (slurmctld, slurmd, sbatch/srun/scancel, and munged for its auth).
  slurm-wlm munge
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root (apt-get)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
