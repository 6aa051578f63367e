#!/usr/bin/env bash
# The Debian packages, built and used as a user would: `--target package`, the contents and
# control fields of each .deb, then everything from an unpacked root (dpkg -x; no dpkg -i, which
# would touch this machine): the installed programs run; a plugin builds OUT of the tree against
# the installed spindle-plugin-dev and the installed `spindle reward score` scores with it; the
# installed python3-spindle runs the SFT loop (tests/python/test_sft.py) against the installed
# spindled; the systemd unit verifies; man pages render; bash completion completes; lintian
# reports no error or warning. Also `pip install protocol/python` offline from the checkout.
# Usage: packaging_test.sh BUILD_DIR SOURCE_DIR   (exit 77 = skipped, with the reason)
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "packaging_test: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }
for tool in dpkg-deb cmake; do command -v $tool >/dev/null || { echo "skip: no $tool"; exit 77; }; done
version=$(sed -n 's/^#define SPINDLE_VERSION "\(.*\)"/\1/p' "$build/generated/spindle/version.h")
[[ -n $version ]] || fail "no SPINDLE_VERSION in $build/generated/spindle/version.h"

step "cmake --build --target package"
rm -rf "$build/packages"/*.deb
cmake --build "$build" --target package >"$work/cpack.log" 2>&1 || { tail -30 "$work/cpack.log"; fail "cpack"; }
pkgs=$build/packages
arch=$(dpkg --print-architecture)
deb_spindle=$pkgs/spindle_${version}-1_${arch}.deb
deb_studio=$pkgs/spindle-studio_${version}-1_${arch}.deb
deb_dev=$pkgs/spindle-plugin-dev_${version}-1_all.deb
deb_py=$pkgs/python3-spindle_${version}-1_all.deb
for d in "$deb_spindle" "$deb_dev" "$deb_py"; do [[ -f $d ]] || fail "missing $d"; done
have_studio=0; [[ -f $deb_studio ]] && have_studio=1

step "contents"
expect() {  # expect DEB PATH...: every PATH is in the package
  local deb=$1; shift
  dpkg-deb --contents "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$work/list"
  for p in "$@"; do grep -qxF "$p" "$work/list" || fail "$(basename "$deb") lacks $p"; done
}
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
expect "$deb_spindle" /usr/bin/spindle /usr/bin/spindled /usr/bin/spindle-reward-host \
  /usr/lib/$multi/spindle/plugins/spindle_reward_numeric_match.so \
  /usr/lib/$multi/spindle/plugins/spindle_reward_keywords.so \
  /usr/share/man/man1/spindle.1.gz /usr/share/man/man1/spindled.1.gz \
  /usr/share/man/man1/spindle-reward-host.1.gz /usr/share/bash-completion/completions/spindle \
  /usr/lib/systemd/system/spindled.service /usr/lib/sysusers.d/spindle.conf \
  /etc/spindle/spindled.json /usr/share/doc/spindle/copyright \
  /usr/share/doc/spindle/changelog.Debian.gz
expect "$deb_dev" /usr/include/spindle/reward.h /usr/include/spindle/reward_plugin.hpp \
  /usr/share/cmake/SpindleRewardPlugin/SpindleRewardPluginConfig.cmake \
  /usr/share/cmake/SpindleRewardPlugin/SpindleRewardPluginConfigVersion.cmake \
  /usr/share/doc/spindle-plugin-dev/examples/word_count/word_count.cpp \
  /usr/share/doc/spindle-plugin-dev/copyright
expect "$deb_py" /usr/lib/python3/dist-packages/spindle/__init__.py \
  /usr/share/doc/python3-spindle/copyright
if ((have_studio)); then
  expect "$deb_studio" /usr/bin/spindle-studio /usr/share/applications/spindle-studio.desktop \
    /usr/share/icons/hicolor/48x48/apps/spindle-studio.png \
    /usr/share/icons/hicolor/256x256/apps/spindle-studio.png \
    /usr/share/icons/hicolor/scalable/apps/spindle-studio.svg /usr/share/man/man1/spindle-studio.1.gz
fi

step "control fields"
field() { dpkg-deb --field "$1" "$2"; }
has() { [[ $(field "$1" "$2") == *"$3"* ]]; }  # has DEB FIELD TEXT
[[ $(field "$deb_spindle" Version) == "${version}-1" ]] || fail "spindle Version"
has "$deb_spindle" Depends "libzmq5" || fail "spindle Depends lacks libzmq5 (shlibdeps)"
has "$deb_spindle" Depends "adduser" || fail "spindle Depends lacks adduser (postinst)"
has "$deb_py" Depends "python3-zmq" || fail "python3-spindle Depends lacks python3-zmq"
has "$deb_py" Depends "python3-numpy" || fail "python3-spindle Depends lacks python3-numpy"
[[ $(field "$deb_dev" Architecture) == all ]] || fail "spindle-plugin-dev is not Architecture: all"
if ((have_studio)); then
  has "$deb_studio" Depends "spindle (= ${version}-1)" || fail "studio Depends"
  has "$deb_studio" Depends "libqt6widgets6" || fail "studio Depends lacks Qt (shlibdeps)"
fi
# (Whole outputs into files first: `cmd | grep -q` under pipefail fails when grep's early exit
# gives cmd a SIGPIPE.)
mkdir -p "$work/control"
dpkg-deb --control "$deb_spindle" "$work/control"
grep -qx /etc/spindle/spindled.json "$work/control/conffiles" ||
  fail "/etc/spindle/spindled.json is not a conffile"
[[ -x $work/control/postinst && -x $work/control/prerm && -x $work/control/postrm ]] ||
  fail "no postinst/prerm/postrm"

step "unpacked root: programs"
root=$work/root
for d in "$pkgs"/*.deb; do dpkg -x "$d" "$root"; done
[[ $("$root/usr/bin/spindle" --version) == "spindle $version" ]] || fail "spindle --version"
[[ $("$root/usr/bin/spindled" --version) == "spindled $version" ]] || fail "spindled --version"
help=$("$root/usr/bin/spindled" --help)
[[ $help == *--device* ]] || fail "spindled --help"
[[ $("$root/usr/bin/spindle-reward-host" --version) == "spindle-reward-host $version" ]] ||
  fail "spindle-reward-host --version"
if ((have_studio)); then
  [[ $(QT_QPA_PLATFORM=offscreen "$root/usr/bin/spindle-studio" --version) == "spindle-studio $version" ]] ||
    fail "spindle-studio --version"
fi
# The installed CLI finds the installed host and built-in plugins (relative to its own path).
plugins=$("$root/usr/bin/spindle" reward plugins --json)
[[ $plugins == *'"numeric_match"'* ]] || fail "built-in plugins"

step "out-of-tree plugin against the installed spindle-plugin-dev"
cp -r "$root/usr/share/doc/spindle-plugin-dev/examples/word_count" "$work/wc-src"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$work/wc-src" -B "$work/wc" "${gen[@]}" -DCMAKE_PREFIX_PATH="$root/usr" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/wc.log" 2>&1 || { cat "$work/wc.log"; fail "configure"; }
cmake --build "$work/wc" >>"$work/wc.log" 2>&1 || { cat "$work/wc.log"; fail "plugin build"; }
grep -q "$root/usr/share/cmake/SpindleRewardPlugin" "$work/wc/CMakeCache.txt" ||
  fail "the plugin did not use the installed package"
echo '{"terms": [{"name": "words", "plugin": "word_count", "weight": 1.0, "config": {"target": 4}}]}' \
  >"$work/spec.json"
printf '%s\n' '{"prompt": "p", "completion": "one two"}' \
  '{"prompt": "p", "completion": "one two three four five six"}' >"$work/data.jsonl"
"$root/usr/bin/spindle" reward score --spec "$work/spec.json" --data "$work/data.jsonl" \
  --plugin-dir "$work/wc" --json >"$work/score.json"
/usr/bin/python3 - "$work/score.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["terms"][0]
assert d["n"] == 2 and t["name"] == "words", d
assert abs(t["min"] - 0.5) < 1e-9 and abs(t["max"] - 1.0) < 1e-9 and abs(t["mean"] - 0.75) < 1e-9, t
PY

step "systemd unit"
if command -v systemd-analyze >/dev/null; then
  sed "s|/usr/bin/spindled|$root/usr/bin/spindled|" "$root/usr/lib/systemd/system/spindled.service" \
    >"$work/spindled.service"
  systemd-analyze verify --man=no "$work/spindled.service" 2>&1 | tee "$work/verify.log"
  [[ ! -s $work/verify.log ]] || fail "systemd-analyze verify reported problems"
else
  echo "skipped: no systemd-analyze"
fi
/usr/bin/python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$root/etc/spindle/spindled.json"

step "man pages and bash completion"
if command -v man >/dev/null; then
  page=$(man -l "$root/usr/share/man/man1/spindle.1.gz" 2>/dev/null)
  [[ $page == *"spindle catalog ls"* ]] || fail "spindle(1) lacks the subcommand sections"
fi
out=$(PATH=$root/usr/bin:$PATH bash -c 'source "$1"; COMP_WORDS=(spindle cat); COMP_CWORD=1;
  _spindle; echo "${COMPREPLY[*]}"' _ "$root/usr/share/bash-completion/completions/spindle")
[[ $out == catalog ]] || fail "completion of 'spindle cat' gave '$out'"

step "python3-spindle: the SFT loop from a clean interpreter against the installed spindled"
(cd "$work" && /usr/bin/python3 -I -c "
import sys; sys.path.insert(0, '$root/usr/lib/python3/dist-packages')
import spindle; assert spindle.__file__.startswith('$root'), spindle.__file__
assert spindle.__version__ == '$version', spindle.__version__")
if [[ -f ${SPINDLE_SHARED_DIR:-$src/../shared}/models/stories260K/stories260K.bin ]]; then
  (cd "$work" && SPINDLE_SDK_PATH=$root/usr/lib/python3/dist-packages \
     SPINDLED_BIN=$root/usr/bin/spindled /usr/bin/python3 -m pytest -q -p no:cacheprovider \
     "$src/tests/python/test_sft.py") || fail "the SFT loop on the installed packages"
else
  echo "skipped the SFT loop: no stories260K fixture (SPINDLE_SHARED_DIR)"
fi

step "pip install protocol/python (offline, from a copy of the checkout)"
cp -r "$src/protocol/python" "$work/pysrc"
rm -rf "$work/pysrc/build" "$work/pysrc"/*.egg-info
/usr/bin/python3 -m pip install -q --no-index --no-build-isolation --no-deps \
  --target "$work/pip" "$work/pysrc" 2>&1 | grep -v "Running pip as the 'root' user" || true
(cd "$work" && /usr/bin/python3 -I -c "
import sys; sys.path.insert(0, '$work/pip'); import spindle; print('pip:', spindle.__file__)")

step "lintian"
if command -v lintian >/dev/null; then
  lintian --fail-on error,warning "$pkgs"/*.deb 2>&1 | grep -v "running with root privileges" ||
    true
  lintian --fail-on error,warning "$pkgs"/*.deb >/dev/null 2>&1 || fail "lintian: errors or warnings"
else
  echo "skipped: no lintian"
fi
echo "packaging_test: OK"
