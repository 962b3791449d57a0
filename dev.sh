#!/usr/bin/env bash
# onnx-light's one entry point. Installs whatever is missing, builds, then runs:
#   bash dev.sh demo    generation demo on a small decoder the project builds itself
#   bash dev.sh test    every C++ (doctest via CTest) and Python (pytest) test
#   bash dev.sh build   only install + build
#   bash dev.sh fuzz [TARGET...]   installs clang + libFuzzer, runs the fuzzers (60 s each)
# Idempotent: a second run with nothing changed installs nothing and rebuilds nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
root=$(pwd)
mode=${1:-demo}
shift || true

apt_packages=(g++ make ninja-build cmake libprotobuf-dev protobuf-compiler libtbb-dev
  libasio-dev pybind11-dev doctest-dev libbenchmark-dev libdlpack-dev python3-dev
  ccache clang-format)

# ccache keys on paths relative to the checkout, so build/ and build-wheel/ (pip wheel .)
# share compiled objects, and a rebuild after `git checkout` of an old commit is quick.
# The sloppiness lets ccache cache objects compiled with ops/'s precompiled header.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros

ensure_apt() {
  local missing=()
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "== installing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# Python packages go into .venv; a stamp holding the requirements' hash skips pip next time.
ensure_venv() {
  local reqs=("$@")
  if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    python3 -m venv .venv
  fi
  mkdir -p .stamps
  local stamp=.stamps/pip-$(cat "${reqs[@]}" | sha1sum | cut -c1-16)
  if [ ! -f "$stamp" ]; then
    echo "== installing Python packages from ${reqs[*]}"
    .venv/bin/python -m pip install -q --disable-pip-version-check $(printf -- '-r %s ' "${reqs[@]}")
    touch "$stamp"
  fi
  local site
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$root/python" > "$site/onnx_light.pth"
}

build() {
  local py
  py=$(.venv/bin/python -c 'import os, sys; print(os.path.realpath(sys.executable))')
  if [ ! -f build/CMakeCache.txt ]; then
    echo "== configuring (build/)"
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$py" \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5 > build-configure.log 2>&1 || {
      cat build-configure.log; exit 1; }
    mv build-configure.log build/configure.log
  elif ! grep -q '^CMAKE_CXX_COMPILER_LAUNCHER:.*ccache' build/CMakeCache.txt; then
    cmake -B build -DCMAKE_CXX_COMPILER_LAUNCHER=ccache > build/configure.log 2>&1
  fi
  echo "== building"
  local start=$SECONDS
  cmake --build build -j "$(nproc)" | grep -vE '^\[[0-9]+/[0-9]+\] (Building|Linking|Generating|Running)' || {
    echo "build failed"; exit 1; }
  echo "== built in $((SECONDS - start)) s"
}

case "$mode" in
  demo)
    ensure_apt; ensure_venv python/requirements.txt; build
    exec .venv/bin/python -m onnx_light.demo "$@" ;;
  test)
    ensure_apt; ensure_venv python/requirements.txt tests/requirements.txt; build
    # The official ONNX backend node tests, generated from the onnx wheel's case definitions
    # into the folder older wheels shipped them in (onnx/backend/test/data/node).
    .venv/bin/python tests/generate_onnx_node_tests.py
    echo "== C++ tests (CTest)"
    ctest --test-dir build --output-on-failure -j "$(nproc)"
    echo "== Python tests (pytest)"
    .venv/bin/python -m pytest tests/python -q "$@" ;;
  build)
    ensure_apt; ensure_venv python/requirements.txt tests/requirements.txt; build ;;
  fuzz)
    # clang and its libFuzzer runtime (Debian's LLVM 14), then tests/fuzz/run_fuzzers.sh:
    # its own build folder (build-fuzz/), SECONDS_PER_TARGET seconds per harness.
    ensure_apt; apt_packages=(clang libclang-rt-14-dev); ensure_apt
    exec bash tests/fuzz/run_fuzzers.sh "$@" ;;
  *)
    echo "usage: bash dev.sh [demo|test|build|fuzz] [args...]" >&2; exit 2 ;;
esac
